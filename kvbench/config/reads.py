"""When each setting is read: one declaration per config key, and the refusal of a setting the run
would not read.

``READS`` holds one row per key of ``conf/`` (a test walks every yaml of every group and finds
each leaf here). A row names the key (a dotted key, or a node such as ``gpu`` or
``gpu.fixed_floor`` that covers every key under it), the module that reads it, and, when the
key is read only under some condition, that condition on the composed config (``when``) with
the line saying what is in force instead and what would make the setting act (``why``). A key
under several rows is read when every row's condition holds.

A setting is *explicit* when the command line sets it (``key=v``, ``+key=v``, a sweep of values,
or a group choice such as ``gpu=h200`` for the rows of that group): ``unread_settings`` refuses
each explicit setting that no job would read, in one line (``kvbench.config.conflicts`` turns
that into the pre-check's refusal for ``kvbench``, every sweep and ``kvbench-capacity``). A value
a group file or an experiment sets is not explicit: group defaults hold values for every case
(``offload.policy: lru`` under ``offload=none``), and an experiment's own keys are checked by a
test. A setting given as null is never refused here: null turns a knob off or to its default.

Rows that are read always say so with no condition; their ``reader`` is where to look. Two
settings that decide one thing (``workload.num_requests`` under ``workload.duration_s``) are rows
too: the loser is read only while the winner is not in force.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig

Why = Callable[[DictConfig], str]


@dataclass(frozen=True)
class Read:
    key: str  # a dotted key, or a node covering every key under it
    reader: str  # the module that reads it (a path from the repository root)
    when: Callable[[DictConfig], bool] | None = None  # None: read whenever the run holds the key
    why: Why | None = None  # not read: what is in force instead, and what makes the setting act

    def covers(self, key: str) -> bool:
        return key == self.key or key.startswith(self.key + ".")


def _always(reader: str, *keys: str) -> tuple[Read, ...]:
    return tuple(Read(key, reader) for key in keys)


def _rows(keys: tuple[str, ...], reader: str, when: Callable[[DictConfig], bool], why: Why) -> tuple[Read, ...]:
    return tuple(Read(key, reader, when, why) for key in keys)


# -- conditions on the composed config ---------------------------------------------------------
def _get(cfg: DictConfig, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = node.get(part)
    return node


def _sim(cfg: DictConfig) -> bool:
    return cfg.backend.name == "sim"


def _timed(cfg: DictConfig) -> bool:
    """The GPU profile's cost model times the steps: backend=sim, or hf with the virtual clock."""
    return _sim(cfg) or str(cfg.engine.get("clock")) == "virtual"


def _replays(cfg: DictConfig) -> bool:
    return "start_s" in cfg.workload  # only replayed traces have a window start


def _host_tier(cfg: DictConfig) -> bool:
    """An offload host tier is on (``kvbench.sim.offload._host_bytes``: the multiple wins)."""
    multiple, fixed = _get(cfg, "offload.host_gpu_multiple"), _get(cfg, "offload.host_bytes")
    return bool(multiple) if multiple is not None else bool(fixed)


def _disk_tier(cfg: DictConfig) -> bool:
    return _host_tier(cfg) and bool(_get(cfg, "offload.disk_bytes"))


def _policy(cfg: DictConfig) -> str:
    return str(cfg.engine.get("policy") or "fcfs")


def _state_layers(cfg: DictConfig) -> bool:
    from kvbench.layer_groups import layer_groups  # the model's groups, read once the model is checked

    return any(g.kind == "state" for g in layer_groups(cfg.model))


def _op_model(cfg: DictConfig) -> str:
    return str(_get(cfg, "gpu.op_model") or "roofline")  # kvbench.sim.cost_model.op_model


def _tensor_parallel(cfg: DictConfig) -> bool:
    count = _get(cfg, "gpu.count")
    return isinstance(count, int) and count > 1


def _allreduce_formula(cfg: DictConfig) -> bool:
    """The all-reduce is timed by the formula: several GPUs and no measured table for their count."""
    if not _tensor_parallel(cfg):
        return False
    from kvbench.sim import allreduce  # start-up time: the measured NCCL tables, sim only

    table = _get(cfg, "gpu.allreduce_table")
    return not table or table not in allreduce.available() or allreduce.table_for(table, cfg.gpu.count) is None


def _synthetic_lengths(cfg: DictConfig) -> bool:
    """The workload draws synthetic lengths (``kvbench.workloads.synthetic``): synthetic, or a
    shared-prefix / system-prompt stream on ``base: synthetic``."""
    return cfg.workload.name == "synthetic" or _get(cfg, "workload.base") == "synthetic"


def _distribution(cfg: DictConfig) -> str:
    return str(_get(cfg, "workload.distribution") or "fixed")


def _torch_attention(cfg: DictConfig) -> bool:
    """engine.attention resolves to torch (``kvbench.executors.hf``): torch, or auto on the CPU."""
    attention = str(cfg.engine.get("attention"))
    if attention != "auto":
        return attention == "torch"
    from kvbench.executors.hf import resolve_device  # start-up time: torch, hf only

    return resolve_device(cfg.engine.device) == "cpu"


def _temperature(cfg: DictConfig) -> float:
    value = _get(cfg, "backend.temperature")
    return float(value) if isinstance(value, (int, float)) else 0.0


# -- the lines of settings not read -----------------------------------------------------------
def _g(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _off(cfg: DictConfig) -> str:
    return (f"offload={_get(cfg, 'offload.name')} keeps no host tier; it acts with offload=host or "
            "offload=host_disk (or offload.host_bytes / offload.host_gpu_multiple > 0)")


def _no_disk(cfg: DictConfig) -> str:
    return (f"offload={_get(cfg, 'offload.name')} keeps no disk tier; it acts with offload=host_disk "
            "(or offload.disk_bytes > 0 behind a host tier)")


def _wall(cfg: DictConfig) -> str:
    return ("backend=hf with engine.clock=wall measures this machine's time, not the cost model's; it acts "
            "on backend=sim or with engine.clock=virtual")


def _one_gpu(cfg: DictConfig) -> str:
    return f"gpu.count={_g(_get(cfg, 'gpu.count'))} runs no all-reduce; it acts with gpu.count > 1"


def _formula(cfg: DictConfig) -> str:
    if not _tensor_parallel(cfg):
        return _one_gpu(cfg)
    return (f"gpu.allreduce_table={cfg.gpu.allreduce_table} times the all-reduce from its measured table; "
            "the formula's constants act with gpu.allreduce_table=null")


def _lengths(wanted: str) -> Why:
    def why(cfg: DictConfig) -> str:
        if not _synthetic_lengths(cfg):
            return (f"workload.base={_get(cfg, 'workload.base')} takes its lengths from that data; it acts with "
                    "workload.base=synthetic")
        return (f"workload.distribution={_distribution(cfg)} draws the lengths another way; it acts with "
                f"workload.distribution={wanted}")
    return why


def _lengths_read(wanted: str) -> Callable[[DictConfig], bool]:
    return lambda cfg: _synthetic_lengths(cfg) and _distribution(cfg) == wanted


ENGINE = "kvbench/engine/scheduler.py"
POLICY = "kvbench/engine/policy_checks.py"
PREPARE = "kvbench/run/prepare.py"
OFFLOAD = "kvbench/sim/offload.py"
COST = "kvbench/sim/cost_model.py"
SYNTHETIC = "kvbench/workloads/synthetic.py"
HF = "kvbench/executors/hf.py"

READS: tuple[Read, ...] = (
    # top level
    *_always("kvbench/run/lifecycle.py", "seed", "results_dir", "progress", "experiment_name",
             "optimized_metric", "baseline"),
    # engine
    *_always(ENGINE, "engine.max_num_batched_tokens", "engine.max_num_seqs", "engine.chunked_prefill",
             "engine.batching", "engine.preemption", "engine.max_steps", "engine.memmap_every", "engine.debug",
             "engine.kv_cache_bytes"),
    *_always(POLICY, "engine.policy", "engine.preemption_victim"),
    Read("engine.sjf_error", POLICY, lambda c: _policy(c) == "sjf",
         lambda c: f"engine.policy={_policy(c)} does not predict output lengths; it acts with engine.policy=sjf"),
    Read("engine.max_wait_s", POLICY, lambda c: _policy(c) != "fcfs",
         lambda c: "engine.policy=fcfs never reorders, so no aging bound applies; it acts with engine.policy="
                   "priority, sjf or lpm"),
    Read("engine.keep_arrival_order", POLICY,
         lambda c: str(c.engine.preemption) == "recompute" or _policy(c) != "fcfs",
         lambda c: "engine.preemption=swap with engine.policy=fcfs keeps a preempted request's place (it waits "
                   "among the swapped ones in arrival order); it acts with engine.preemption=recompute or "
                   "another engine.policy"),
    Read("engine.swap_space_bytes", "kvbench/engine/swap_space.py", lambda c: str(c.engine.preemption) == "swap",
         lambda c: f"engine.preemption={c.engine.preemption} swaps nothing; set engine.preemption=swap to use it"),
    Read("engine.swap_space_bytes", "kvbench/engine/swap_space.py", lambda c: not _host_tier(c),
         lambda c: f"offload={c.offload.name} wins: swapped K/V go to its host tier (one pool, one "
                   "accounting); size that with offload.host_bytes or offload.host_gpu_multiple"),
    Read("engine.gpu_memory_utilization", PREPARE, lambda c: not (_sim(c) and c.engine.get("kv_cache_bytes") is not None),
         lambda c: f"engine.kv_cache_bytes={c.engine.kv_cache_bytes:g} wins (the pool is that size); set one of them"),
    Read("engine.gpu_memory_utilization", PREPARE, _sim,
         lambda c: "backend=hf sizes its pool with engine.kv_cache_fraction (or engine.kv_cache_bytes); "
                   "gpu_memory_utilization is the sim backend's"),
    Read("engine.kv_cache_fraction", HF, lambda c: _sim(c) or c.engine.get("kv_cache_bytes") is None,
         lambda c: f"engine.kv_cache_bytes={c.engine.kv_cache_bytes:g} wins (the pool is that size); set one of them"),
    Read("engine.kv_cache_fraction", HF, lambda c: not _sim(c),
         lambda c: "backend=sim sizes its pool with engine.gpu_memory_utilization (or engine.kv_cache_bytes); "
                   "kv_cache_fraction is the hf backend's"),
    Read("engine.clock", HF, lambda c: not _sim(c) or str(c.engine.get("clock")) == "virtual",
         lambda c: "backend=sim always times steps with the cost model (the virtual clock); "
                   "engine.clock is the hf backend's"),
    *(Read(f"engine.{key}", HF, lambda c: not _sim(c),
           lambda c, k=key: f"engine.{k} is a knob of backend=hf; backend=sim runs no model")
      for key in ("attention", "device", "threads")),
    # allocator
    *_always("allocators/__init__.py", "allocator.name", "allocator.block_size", "allocator.reserve",
             "allocator.min_order", "allocator.eviction", "allocator.insert_running", "allocator.window",
             "allocator.page_bytes", "allocator.token_bytes", "allocator.reclaim", "allocator.ratios",
             "allocator.enable_caching"),
    Read("allocator.double_chunk", "allocators/region.py", lambda c: c.allocator.get("reserve") == "double",
         lambda c: f"allocator.reserve={c.allocator.get('reserve')} sizes a region once, at admission; it acts "
                   "with allocator.reserve=double"),
    Read("allocator.split_len", "allocators/hybrid.py", lambda c: c.allocator.get("ratios") is None,
         lambda c: "allocator.ratios splits the pool as given; split_len sizes the split only with "
                   "allocator.ratios=null"),
    Read("allocator.state_checkpoint_every", "allocators/grouped_prefix.py", _state_layers,
         lambda c: f"model {c.model.name} has no state layers (Mamba / linear attention) to checkpoint; it acts "
                   "on a model with them (e.g. model=jamba-1.5-mini)"),
    Read("allocator.cache_at", "kvbench/peers/vllm_v1.py", lambda c: c.allocator.get("enable_caching") is not False,
         lambda c: "allocator.enable_caching=false hashes no block; it acts with allocator.enable_caching=true"),
    # backend
    *_always("kvbench/run/prepare.py", "backend.name"),
    *_always("kvbench/hf/sampling.py", "backend.temperature"),
    *_rows(("backend.top_p", "backend.top_k"), "kvbench/hf/sampling.py", lambda c: _temperature(c) > 0,
           lambda c: "backend.temperature=0 samples the greedy token; it acts with backend.temperature > 0"),
    Read("backend.torch_attention", HF, _torch_attention,
         lambda c: f"engine.attention={c.engine.attention} runs the Triton kernel here; it acts with "
                   "engine.attention=torch (or auto on the CPU)"),
    # gpu: the profile times steps only through the cost model
    Read("gpu", COST, _timed,
         lambda c: "on backend=hf the gpu profile times steps only with engine.clock=virtual; "
                   "the wall clock measures this machine"),
    *_rows(tuple(f"gpu.{key}" for key in ("gemm_eff_max", "gemm_m_half", "gemm_n_half", "gemm_k_half",
                                            *(f"{k}_{s}" for s in ("eff_bw", "fixed_s")
                                              for k in ("gemm", "norm", "act", "rope", "add")))),
           COST, lambda c: _op_model(c) == "roofline",
           lambda c: f"gpu.op_model={_op_model(c)} reads its constants from gpu.fixed_floor; it acts with "
                     "gpu.op_model=roofline (or set gpu.fixed_floor.<name>)"),
    Read("gpu.fixed_floor", COST, lambda c: _op_model(c) == "fixed_floor",
         lambda c: f"gpu.op_model={_op_model(c)} reads the top-level constants; it acts with "
                   "gpu.op_model=fixed_floor"),
    Read("gpu.allreduce_table", "kvbench/sim/allreduce.py", _tensor_parallel, _one_gpu),
    *_rows(("gpu.allreduce_latency_s", "gpu.eff_interconnect", "gpu.interconnect_bandwidth"), COST,
           _allreduce_formula, _formula),
    Read("gpu.offload_link", OFFLOAD, _host_tier, _off),
    # every other field of a profile feeds the cost model (CostParams.from_configs)
    # system: the host side of the simulated system
    *_always("kvbench/engine/policies.py", "system.name", "system.scheduling"),
    Read("system.memory_profile", PREPARE, _sim,
         lambda c: "backend=hf sizes its pool from the device's free memory (engine.kv_cache_fraction); "
                   "system.memory_profile is the sim backend's"),
    Read("system.memory_profile", PREPARE, lambda c: c.engine.get("kv_cache_bytes") is None,
         lambda c: f"engine.kv_cache_bytes={c.engine.kv_cache_bytes:g} wins (the pool is that size, nothing "
                   "is profiled); it acts with engine.kv_cache_bytes=null"),
    *_rows(tuple(f"system.{k}" for k in ("step_overhead_s", "seq_overhead_s", "sample_host_s", "eager_layer_issue_s")),
           COST, _timed, _wall),
    *_rows(tuple(f"system.{k}" for k in ("disk_read_bandwidth", "disk_write_bandwidth", "disk_latency_s")),
           OFFLOAD, _disk_tier, _no_disk),
    # offload
    *_always(OFFLOAD, "offload.name", "offload.host_gpu_multiple"),
    Read("offload.host_bytes", OFFLOAD, lambda c: _get(c, "offload.host_gpu_multiple") is None,
         lambda c: f"offload.host_gpu_multiple={_g(c.offload.host_gpu_multiple)} sizes the host tier (x the "
                   "GPU's KV bytes); it acts with offload.host_gpu_multiple=null (offload=none: no tier at all)"),
    *_rows(tuple(f"offload.{k}" for k in ("policy", "write", "load", "store_order", "block_tokens", "disk_bytes")),
           OFFLOAD, _host_tier, _off),
    Read("offload.disk_policy", OFFLOAD, _disk_tier, _no_disk),
    # model: every field shapes the geometry, the cost model or the hf model
    Read("model", "kvbench/geometry.py"),
    Read("model.load", "kvbench/hf/model.py", lambda c: not _sim(c),
         lambda c: "backend=sim loads no weights (the cost model needs the shapes only); it acts on backend=hf"),
    # logger and metrics
    *_always("kvbench/loggers/wandb_logger.py", "logger.name", "logger.project", "logger.entity", "logger.mode",
             "logger.group", "logger.tags", "logger.dir", "logger.max_step_logs", "logger.verbose"),
    *_always("kvbench/metrics.py", "metrics.percentiles", "metrics.goodput", "metrics.report"),
    # workload
    *_always("kvbench/workloads/", "workload.name", "workload.request_rate", "workload.n",
             "workload.beam_width", "workload.seed", "workload.duration_s", "workload.max_concurrency",
             "workload.repeat", "workload.path", "workload.real_prompts", "workload.source",
             "workload.synthetic_prompt_sigma", "workload.synthetic_output_sigma", "workload.base",
             "workload.start_s", "workload.target_rate", "workload.overlong", "workload.priority_field",
             "workload.priority_shares", "workload.prefix_len", "workload.system_prompt_lens", "workload.zipf_s",
             "workload.lengths", "workload.target_mean_prompt", "workload.target_mean_output",
             "workload.max_prompt_len", "workload.max_output_len", "workload.max_turns", "workload.think_time_s",
             "workload.think_time_dist", "workload.dependent"),
    Read("workload.num_requests", "kvbench/workloads/common.py",
         lambda c: _replays(c) or _get(c, "workload.duration_s") is None,
         lambda c: f"workload.duration_s={c.workload.duration_s} wins (every arrival in "
                   f"[0, {c.workload.duration_s}) s is kept); set one of them, or workload.num_requests=null"),
    Read("workload.time_scale", "kvbench/workloads/traces.py",
         lambda c: not _replays(c) or _get(c, "workload.target_rate") is None,
         lambda c: f"workload.target_rate={c.workload.target_rate} wins (it picks the time scale); set one of them"),
    Read("workload.ignore_eos", HF, lambda c: not (_sim(c) and c.workload.get("ignore_eos") is False),
         lambda c: "backend=sim has no EOS token: every sample runs to its output length; "
                   "ignore_eos=false is the hf backend's"),
    Read("workload.burstiness", "kvbench/workloads/common.py",
         lambda c: not math.isinf(float(c.workload.get("request_rate", math.inf))),
         lambda c: "workload.request_rate=inf sends every request at time 0 (no gaps to shape); it acts with a "
                   "finite workload.request_rate"),
    Read("workload.expected_tpot_s", "kvbench/workloads/multiturn.py", lambda c: c.workload.get("dependent") is False,
         lambda c: "workload.dependent=true releases each next turn when the last one finishes; it acts with "
                   "workload.dependent=false"),
    Read("workload.distribution", SYNTHETIC, _synthetic_lengths, _lengths("fixed")),
    *_rows(("workload.prompt_len", "workload.output_len"), SYNTHETIC, _lengths_read("fixed"), _lengths("fixed")),
    *_rows(tuple(f"workload.{k}_{b}" for k in ("prompt", "output") for b in ("min", "max")), SYNTHETIC,
           _lengths_read("uniform"), _lengths("uniform")),
    *_rows(tuple(f"workload.{k}_{b}" for k in ("prompt", "output") for b in ("mean", "sigma")), SYNTHETIC,
           _lengths_read("lognormal"), _lengths("lognormal")),
)


def rows_for(key: str) -> list[Read]:
    """The rows that declare ``key`` (its own, and those of the nodes above it)."""
    return [row for row in READS if row.covers(key)]


def _shown(cfg: DictConfig, key: str) -> str | None:
    """``key=value`` as the command line would set it; None when the value is null."""
    value = _get(cfg, key) if "." in key else cfg.get(key)
    if value is None:
        return None
    if isinstance(value, DictConfig):
        return f"{key}={value.get('name')}"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    return f"{key}={_g(value)}"


def unread_settings(cfg: DictConfig, keys: list[str]) -> dict[str, str]:
    """Each explicit setting (``keys``, command-line order) that this config would not read ->
    the one line refusing it: what is in force instead, and what would make it act."""
    refusals: dict[str, str] = {}
    for key in keys:
        for row in rows_for(key):
            if row.when is None or key in refusals or row.when(cfg):
                continue
            shown = _shown(cfg, key)
            if shown is not None:
                refusals[key] = f"{shown} would be ignored: {row.why(cfg)}"
    return refusals
