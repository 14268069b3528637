"""Checks of a composed config that must pass before anything is written (exit code 2 otherwise)."""
from __future__ import annotations

import math
from pathlib import Path

from allocators import STRATEGIES
from allocators.cache_policy import POLICIES
from kvbench.config.errors import ConfigError
from kvbench.config.validate import check_rules
from kvbench.geometry import layer_windows
from kvbench.layer_groups import layer_groups
from kvbench.peers import PEERS


def _choice(cfg, key: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def _positive_int(key: str, value, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}; got {value!r}")


def _check_paths(cfg) -> None:
    results = cfg.get("results_dir")
    if not isinstance(results, str) or not results.strip():
        raise ConfigError(f"results_dir must be a non-empty path; got {results!r}")
    name = cfg.get("experiment_name")
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or name.startswith(".")):
        raise ConfigError(f"experiment_name must be a plain folder name (no '/', not starting with '.'); got {name!r}")


def _check_prompt_fits(cfg) -> None:
    """A fixed synthetic prompt that alone fills the model would be clipped on every request."""
    wl, limit = cfg.workload, cfg.model.max_model_len
    if wl.get("distribution") == "fixed" and isinstance(wl.get("prompt_len"), int) and wl.prompt_len >= limit:
        raise ConfigError(f"workload.prompt_len must be < model.max_model_len ({limit}) so that one output token "
                          f"fits; got {wl.prompt_len}")


def validate(cfg) -> None:
    """Cheap checks of every knob the run reads; the allocator and workload check their own."""
    _check_paths(cfg)
    check_rules(cfg)

    _choice(cfg, "allocator.name", cfg.allocator.name, sorted(STRATEGIES) + sorted(PEERS))
    if "eviction" in cfg.allocator and cfg.allocator.eviction is None:  # as offload.policy=null: no hidden default
        _choice(cfg, "allocator.eviction", None, tuple(POLICIES))
    _choice(cfg, "backend.name", cfg.backend.name, ("sim", "hf"))
    eng = cfg.engine
    _positive_int("engine.max_num_batched_tokens", eng.max_num_batched_tokens)
    _positive_int("engine.max_num_seqs", eng.max_num_seqs)
    _choice(cfg, "engine.preemption", eng.preemption, ("recompute", "swap"))
    _choice(cfg, "engine.attention", eng.attention, ("auto", "torch", "triton"))
    _choice(cfg, "engine.device", eng.device, ("auto", "cpu", "cuda"))
    _choice(cfg, "engine.chunked_prefill", eng.chunked_prefill, (True, False))
    _choice(cfg, "engine.batching", eng.get("batching", "continuous"), ("continuous", "static", "static_unpadded"))
    system = cfg.get("system")
    if system is not None:
        _choice(cfg, "system.scheduling", system.get("scheduling"), ("mixed", "prompt_first"))
        # kvbench.sim.cost_model.MEMORY_PROFILES (not imported here: start-up time)
        _choice(cfg, "system.memory_profile", system.get("memory_profile", "vllm-v1"), ("vllm-v1", "vllm-0.1"))
        for key in ("step_overhead_s", "seq_overhead_s", "sample_host_s", "eager_layer_issue_s"):
            value = system.get(key)
            if value is not None and (not isinstance(value, (int, float)) or value < 0 or math.isnan(value)):
                raise ConfigError(f"system.{key} must be a number of seconds >= 0 or null; got {value!r}")
    _choice(cfg, "engine.clock", eng.get("clock", "wall"), ("wall", "virtual"))
    for key in ("kv_cache_bytes", "swap_space_bytes"):
        value = eng.get(key)
        if value is not None and (not isinstance(value, (int, float)) or value < 0 or math.isnan(value)):
            raise ConfigError(f"engine.{key} must be a number of bytes >= 0 or null; got {value!r}")
    for key in ("gpu_memory_utilization", "kv_cache_fraction"):
        value = eng.get(key)
        if not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ConfigError(f"engine.{key} must be in (0, 1]; got {value!r}")
    model = cfg.model
    for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_size", "vocab_size", "max_model_len"):
        _positive_int(f"model.{key}", model[key])
    _choice(cfg, "model.dtype", model.dtype, ("float32", "float16", "bfloat16"))
    try:
        layer_windows(model)
        layer_groups(model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if model.num_heads % model.num_kv_heads:
        raise ConfigError(f"model.num_heads ({model.num_heads}) must be a multiple of model.num_kv_heads ({model.num_kv_heads})")
    wl = cfg.workload
    for key in ("n", "beam_width"):
        if key in wl:
            _positive_int(f"workload.{key}", wl[key])
    if wl.get("n", 1) > 1 and wl.get("beam_width", 1) > 1:
        raise ConfigError("workload.n and workload.beam_width cannot both be > 1")
    if "num_requests" in wl and wl.num_requests is not None:
        _positive_int("workload.num_requests", wl.num_requests)
    rate = wl.get("request_rate")
    if rate is not None and (not isinstance(rate, (int, float)) or math.isnan(rate) or rate <= 0):
        raise ConfigError(f"workload.request_rate must be > 0 or inf; got {rate!r}")
    _check_metrics(cfg)
    _check_prompt_fits(cfg)
    if cfg.logger.name == "wandb":
        _choice(cfg, "logger.mode", cfg.logger.get("mode"), ("offline", "online", "disabled"))
    path = wl.get("path")
    if path and not Path(str(path)).expanduser().exists():
        raise ConfigError(f"workload.path: file not found: {path}")


def _check_metrics(cfg) -> None:
    from kvbench.metrics import MetricsConfigError, parse_goodput, parse_percentiles  # start-up time: pandas

    metrics = cfg.get("metrics") or {}
    try:
        parse_percentiles(metrics.get("percentiles"))
        parse_goodput(metrics.get("goodput"))
    except MetricsConfigError as exc:
        raise ConfigError(str(exc)) from None
    metric = cfg.get("optimized_metric")
    if metric is not None and not isinstance(metric, str):
        raise ConfigError(f"optimized_metric must be a summary column name; got {metric!r}")
