"""The table of numeric and boolean knobs and what each allows, checked before anything is written.

Each ``Rule`` names a config key and its range; ``check_rules(cfg)`` raises ``ConfigError`` with
one line naming the first wrong key and what is allowed. Add a row to ``RULES`` for a new knob;
a rule with ``when`` applies only to configs that pass that test (e.g. sim-only GPU fields).
"""
from __future__ import annotations

import math
import netrc
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.engine.scheduler import beam_limit_error
from kvbench.sim.offload import check_offload

PIB = 2**50
MAX_REQUESTS = 10_000_000  # as many arrivals as a duration_s workload may make
BYTES_PER_PROMPT_TOKEN = 36  # a Python int in a list: the pointer plus the int object
MIN_RATE = 1e-6  # requests/s: one request in 11.6 days; below, a run's arrivals span ages
MAX_HOST_S = 10.0  # seconds of host work per step, sequence or token: beyond any real system
MAX_WAIT_S = 1e6  # seconds a user may think between two turns (11.6 days)


@dataclass(frozen=True)
class Rule:
    key: str  # dotted config key
    kind: str  # "int", "number" or "bool"
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    above: float | None = None  # exclusive lower bound
    optional: bool = False  # null allowed
    allow_inf: bool = False
    when: Callable[[object], bool] | None = None

    def allowed(self) -> str:
        what = {"int": "an integer", "number": "a number", "bool": "true or false"}[self.kind]
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        if self.low is not None:
            bounds.append(f">= {self.low:g}")
        if self.high is not None:
            bounds.append(f"<= {self.high:g}")
        text = what + (" " + " and ".join(bounds) if bounds else "")
        if self.allow_inf:
            text += " (or inf)"
        return text + (" or null" if self.optional else "")

    def check(self, value: object) -> None:
        if value is None and self.optional:
            return
        if not self._fits(value):
            raise ConfigError(f"{self.key} must be {self.allowed()}; got {value!r}")

    def _fits(self, value: object) -> bool:
        if self.kind == "bool":
            return isinstance(value, bool)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if math.isnan(value) or (math.isinf(value) and not (self.allow_inf and value > 0)):
            return False
        if self.above is not None and not value > self.above:
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high or (self.allow_inf and math.isinf(value))


def _sim(cfg) -> bool:
    """The GPU profile times the steps: the sim backend, or hf with the virtual clock."""
    return cfg.backend.name == "sim" or cfg.engine.get("clock") == "virtual"


def _wandb(cfg) -> bool:
    return cfg.logger.name == "wandb"


def _has(key: str) -> Callable[[object], bool]:
    return lambda cfg: _select(cfg, key, missing=True) is not _MISSING


def _set(key: str) -> Callable[[object], bool]:
    """Present and not null (a null seed inherits the run's ``seed``: kvbench.config.seeds)."""
    return lambda cfg: _select(cfg, key, missing=True) not in (_MISSING, None)


RULES: list[Rule] = [
    Rule("seed", "int", low=0, high=2**63 - 1),
    Rule("progress", "bool"),
    # GPU profile (sim backend)
    Rule("gpu.memory_bytes", "number", above=0, high=PIB, when=_sim),
    *(Rule(f"gpu.{key}", "number", above=0, high=1e18, when=_sim)
      for key in ("peak_flops", "mem_bandwidth", "host_bandwidth")),
    # read only where the cost model needs them (CostParams.from_configs): the fp32 peak by a
    # float32 model, the link by tensor parallelism, which falls back to host_bandwidth without it
    Rule("gpu.peak_flops_fp32", "number", above=0, high=1e18,
         when=lambda cfg: _sim(cfg) and (_has("gpu.peak_flops_fp32")(cfg) or _select(cfg, "model.dtype") == "float32")),
    Rule("gpu.interconnect_bandwidth", "number", above=0, high=1e18,
         when=lambda cfg: _sim(cfg) and _has("gpu.interconnect_bandwidth")(cfg)),
    Rule("gpu.count", "int", low=1, high=4096, when=_sim),
    # cost-model operator constants a GPU profile may set (kvbench/sim/operators.py)
    *(Rule(f"gpu.{key}", "number", above=0, high=1, when=lambda cfg, k=key: _sim(cfg) and _has(f"gpu.{k}")(cfg))
      for key in ("gemm_eff_max", "gemm_eff_bw", "norm_eff_bw", "act_eff_bw", "rope_eff_bw", "add_eff_bw")),
    *(Rule(f"gpu.{key}", "number", low=0, high=1e6, when=lambda cfg, k=key: _sim(cfg) and _has(f"gpu.{k}")(cfg))
      for key in ("gemm_m_half", "gemm_n_half", "gemm_k_half")),
    *(Rule(f"gpu.{key}_fixed_s", "number", low=0, high=1, when=lambda cfg, k=key: _sim(cfg) and _has(f"gpu.{k}_fixed_s")(cfg))
      for key in ("gemm", "norm", "act", "rope", "add")),
    # engine
    Rule("engine.max_num_batched_tokens", "int", low=1, high=10_000_000),
    Rule("engine.max_num_seqs", "int", low=1, high=1_000_000),
    Rule("engine.kv_cache_bytes", "number", above=0, high=PIB, optional=True),
    Rule("engine.swap_space_bytes", "number", low=0, high=PIB, optional=True),
    Rule("engine.gpu_memory_utilization", "number", above=0, high=1),
    Rule("engine.kv_cache_fraction", "number", above=0, high=1),
    Rule("engine.threads", "int", low=1, high=4096, optional=True),
    Rule("engine.max_steps", "int", low=1, optional=True),
    Rule("engine.memmap_every", "int", low=0),
    Rule("engine.debug", "bool"),
    Rule("engine.chunked_prefill", "bool"),
    # scheduling and preemption policy (kvbench/engine/queue_orders.py, victims.py)
    Rule("engine.max_wait_s", "number", above=0, high=MAX_WAIT_S, optional=True, when=_has("engine.max_wait_s")),
    Rule("engine.sjf_error", "number", low=0, high=10, when=_has("engine.sjf_error")),
    Rule("engine.keep_arrival_order", "bool", when=_has("engine.keep_arrival_order")),
    # workload knobs every workload takes
    Rule("workload.num_requests", "int", low=1, optional=True, when=_has("workload.num_requests")),
    Rule("workload.request_rate", "number", low=MIN_RATE, allow_inf=True, when=_has("workload.request_rate")),
    Rule("workload.burstiness", "number", above=0, when=_has("workload.burstiness")),
    Rule("workload.n", "int", low=1, high=1024, when=_has("workload.n")),
    Rule("workload.beam_width", "int", low=1, high=1024, when=_has("workload.beam_width")),
    Rule("workload.seed", "int", low=0, high=2**63 - 1, when=_set("workload.seed")),
    Rule("workload.duration_s", "number", above=0, optional=True, when=_has("workload.duration_s")),
    # replayed production traces (kvbench/workloads/traces.py)
    Rule("workload.start_s", "number", low=0, when=_has("workload.start_s")),
    Rule("workload.time_scale", "number", above=0, when=_has("workload.time_scale")),
    Rule("workload.target_rate", "number", above=0, optional=True, when=_has("workload.target_rate")),
    # model: MLA and other K/V head sizes of their own (kvbench.geometry)
    *(Rule(f"model.{key}", "int", low=1, high=1_000_000, optional=True, when=_has(f"model.{key}"))
      for key in ("v_head_size", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank")),
    # sharegpt_matched: the paper's stated means it rescales the real lengths to
    Rule("workload.target_mean_prompt", "number", above=0, high=1e6, when=_has("workload.target_mean_prompt")),
    Rule("workload.target_mean_output", "number", above=0, high=1e6, when=_has("workload.target_mean_output")),
    # logger
    Rule("logger.max_step_logs", "int", low=0, when=_wandb),
    # load mode and tracker console (issue 26)
    Rule("workload.max_concurrency", "int", low=1, optional=True, when=_has("workload.max_concurrency")),
    Rule("logger.verbose", "bool", when=_wandb),
    # host costs of the system profile (null: the cost model's default), seconds
    *(Rule(f"system.{key}", "number", low=0, high=MAX_HOST_S, optional=True, when=_has(f"system.{key}"))
      for key in ("step_overhead_s", "seq_overhead_s", "sample_host_s", "eager_layer_issue_s")),
    # the disk of the offload tiers (kvbench/sim/offload.py)
    *(Rule(f"system.{key}", "number", above=0, high=1e15, when=_has(f"system.{key}"))
      for key in ("disk_read_bandwidth", "disk_write_bandwidth")),
    Rule("system.disk_latency_s", "number", low=0, high=MAX_HOST_S, when=_has("system.disk_latency_s")),
    # workload knobs of one workload each (absent elsewhere)
    Rule("workload.prefix_len", "int", low=0, high=10_000_000, when=_has("workload.prefix_len")),
    Rule("workload.max_turns", "int", low=1, high=10_000, when=_has("workload.max_turns")),
    Rule("workload.think_time_s", "number", low=0, high=MAX_WAIT_S, when=_has("workload.think_time_s")),
    Rule("workload.expected_tpot_s", "number", above=0, high=MAX_HOST_S, when=_has("workload.expected_tpot_s")),
    Rule("workload.zipf_s", "number", low=0, high=100, when=_has("workload.zipf_s")),
    Rule("workload.dependent", "bool", when=_has("workload.dependent")),
    Rule("workload.real_prompts", "bool", when=_has("workload.real_prompts")),
    Rule("workload.repeat", "bool", when=_has("workload.repeat")),
    Rule("workload.ignore_eos", "bool", when=_has("workload.ignore_eos")),
    Rule("metrics.report", "bool", when=_has("metrics.report")),
    # sampling (hf backend)
    Rule("backend.temperature", "number", low=0, high=100, when=_has("backend.temperature")),
    Rule("backend.top_p", "number", above=0, high=1, when=_has("backend.top_p")),
    Rule("backend.top_k", "int", low=0, when=_has("backend.top_k")),
]

_MISSING = object()


def _select(cfg, key: str, missing: bool = False):
    node = cfg
    for part in key.split("."):
        if not hasattr(node, "get") or part not in node:
            return _MISSING if missing else None
        node = node[part]
    return node


def check_rules(cfg) -> None:
    """Raise ConfigError for the first knob of RULES whose value is outside its range."""
    _check_request_count(cfg)
    for rule in RULES:
        if rule.when is None or rule.when(cfg):
            value = _select(cfg, rule.key, missing=True)
            if value is _MISSING:
                raise ConfigError(f"{rule.key} is missing; it must be {rule.allowed()}")
            rule.check(value)
    _check_beam_limits(cfg)
    _check_allreduce_table(cfg)
    _check_op_model(cfg)
    check_names(cfg)
    check_choices(cfg)
    check_baseline(cfg)
    check_wandb_key(cfg)
    check_offload(cfg)


def _check_allreduce_table(cfg) -> None:
    """A sim GPU's measured all-reduce table must be one that ships (kvbench/sim/allreduce.py)."""
    name = _select(cfg, "gpu.allreduce_table", missing=True) if _sim(cfg) else None
    if name is not None and name is not _MISSING:
        from kvbench.sim import allreduce  # start-up time: the measured NCCL tables

        if name not in allreduce.available():
            raise ConfigError(f"gpu.allreduce_table must be one of {allreduce.available()} or null; got {name!r}")


def _check_op_model(cfg) -> None:
    """A sim GPU's operator model must be one the cost model has (kvbench/sim/operators.py)."""
    name = _select(cfg, "gpu.op_model", missing=True) if _sim(cfg) else None
    if name is not None and name is not _MISSING:
        from kvbench.sim.operators import OP_MODELS  # start-up time: the operator models (numpy), sim only

        if name not in OP_MODELS:
            raise ConfigError(f"gpu.op_model must be one of {list(OP_MODELS)}; got {name!r}")


def _check_beam_limits(cfg) -> None:
    """Refuse beams wider than one step can decode: they could never run."""
    width = _select(cfg, "workload.beam_width")
    if isinstance(width, int) and width > 1:
        error = beam_limit_error(width, cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens)
        if error is not None:
            raise ConfigError(f"workload.beam_width: {error}")


def _check_request_count(cfg) -> None:
    """Refuse a stream whose prompts alone would not fit in memory, saying what it would need."""
    wl = cfg.workload
    num = wl.get("num_requests")
    if not isinstance(num, (int, float)) or isinstance(num, bool) or not math.isfinite(num) or num <= MAX_REQUESTS:
        return
    num = int(num)
    prompt = wl.get("prompt_len") if isinstance(wl.get("prompt_len"), int) else 128
    need = num * (prompt * BYTES_PER_PROMPT_TOKEN + 1024)
    raise ConfigError(f"workload.num_requests must be <= {MAX_REQUESTS:,}; {num:,} requests would need about "
                      f"{need / 2**30:,.0f} GiB of memory for their prompts and records alone")


# -- checks beyond the knob table -----------------------------------------------------------
CHOICES: dict[str, tuple[str, ...]] = {  # string knobs no other check reads before the run
    "model.load": ("dummy", "pretrained"),
    "backend.torch_attention": ("batched", "reference"),
    "engine.policy": ("fcfs", "priority", "sjf", "lpm"),
    "engine.preemption_victim": ("newest", "lowest_priority", "least_computed", "most_blocks"),
}


def check_choices(cfg) -> None:
    for key, allowed in CHOICES.items():
        value = _select(cfg, key, missing=True)
        if value is not _MISSING and value is not None and value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")


MAX_NAME_BYTES = 200  # a folder name, with room for the run id beside it (file systems allow 255)


def check_names(cfg) -> None:
    """Folder names that every file system takes, and a results dir that is not a dangling link."""
    name = cfg.get("experiment_name")
    if isinstance(name, str) and len(name.encode()) > MAX_NAME_BYTES:
        raise ConfigError(f"experiment_name must be at most {MAX_NAME_BYTES} bytes (it names a folder); "
                          f"got {len(name.encode())}")
    if isinstance(name, str) and not name.strip():
        raise ConfigError(f"experiment_name must be a plain folder name; got {name!r}")
    results = cfg.get("results_dir")
    if not isinstance(results, str):
        return
    for part in Path(results).parts:
        if len(part.encode()) > 255:
            raise ConfigError(f"results_dir: the folder name {part[:20]}... is {len(part.encode())} bytes; "
                              "file systems allow 255")
    path = Path(results).expanduser()
    for folder in (path, *path.parents):
        if folder.is_symlink() and not folder.exists():
            raise ConfigError(f"results_dir: {folder} is a symlink to {os.readlink(folder)}, which does not exist")


def check_baseline(cfg) -> None:
    """A named baseline (``+baseline=orca-max``) fixes its allocator and engine knobs: refuse a run
    that changes one of them, since its results would carry a baseline name they do not measure."""
    name = cfg.get("baseline")
    if name is None:
        return
    path = CONF_DIR / "baseline" / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        options = sorted(p.stem for p in (CONF_DIR / "baseline").glob("*.yaml"))
        raise ConfigError(f"baseline must be one of {', '.join(options)}; got {name!r}")
    fixed = OmegaConf.load(path)
    for group in ("allocator", "engine"):
        for key, value in (fixed.get(group) or {}).items():
            actual = _select(cfg, f"{group}.{key}")
            if actual != value:
                raise ConfigError(f"baseline={name} fixes {group}.{key}={value}; this run sets {actual}: "
                                  f"drop +baseline or the {group}.{key} override")


def check_wandb_key(cfg) -> None:
    """``logger.mode=online`` needs an API key (WANDB_API_KEY or a netrc login) before the run starts."""
    if not _wandb(cfg) or cfg.logger.get("mode") != "online" or os.environ.get("WANDB_API_KEY"):
        return
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return
    except (OSError, netrc.NetrcParseError):
        pass
    raise ConfigError("logger.mode=online needs a W&B API key: set WANDB_API_KEY or run `wandb login`, "
                      "or use logger.mode=offline")


def check_servable(cfg, requests) -> None:
    """Refuse a run that would reject every request for a reason known before it starts."""
    if not requests:
        return
    eng = cfg.engine
    budget = eng.max_num_batched_tokens
    shortest = min(r.prompt_len for r in requests)
    if not eng.chunked_prefill and isinstance(budget, int) and shortest > budget:
        raise ConfigError(f"engine.max_num_batched_tokens={budget} is below every prompt (the shortest has "
                          f"{shortest} tokens) with engine.chunked_prefill=false: every request would be "
                          "rejected; raise the budget or set engine.chunked_prefill=true")


def check_dataset(cfg, workload) -> None:
    """A data file the user names must be whole: one that ends inside the array (cut off in a copy
    or a download) would run on the records before the cut without a word. The packaged
    ShareGPT copy (no workload.path) is torn upstream and stays accepted."""
    path = cfg.workload.get("path")
    meta = getattr(workload, "meta", {}) or {}
    if path and meta.get("torn_tail"):
        raise ConfigError(f"workload.path: {path} is cut off: it ends inside the JSON array after "
                          f"{meta.get('records', '?')} complete records; give a whole file")


def check_activation(cfg) -> None:
    """``model.hidden_activation`` (Gemma) names a transformers activation, on every backend."""
    activation = cfg.model.get("hidden_activation")
    if activation is None:
        return
    from transformers.activations import ACT2FN  # start-up time: transformers, hf only

    if activation not in ACT2FN:
        raise ConfigError(f"model.hidden_activation must be a transformers activation such as gelu_pytorch_tanh; "
                          f"got {activation!r}")

