"""Everything a run needs, built and checked from the composed config: the pool size and the
allocator, the workload, the executor (``prepare``); a bad value raises a kvbench error."""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from allocators import AllocatorError, build as build_allocator
from kvbench.config.errors import ConfigError
from kvbench.config.compose import validate
from kvbench.config.seeds import resolve_seeds
from kvbench.config.spec import RunSpec, model_geometry, pool_slots, scheduler_limits, workload_summary
from kvbench.engine.policy_checks import check_priorities
from kvbench.geometry import KVGeometry
from kvbench.run.group_knobs import group_knobs
from kvbench.sim.offload import build_tiers
from kvbench.peers import PEERS, build_peer
from kvbench.workloads import WorkloadError, build_workload

KVBENCH_ERRORS: tuple[type[Exception], ...] = (ConfigError, AllocatorError)


def _errors() -> tuple[type[Exception], ...]:
    return KVBENCH_ERRORS + (WorkloadError,)


@dataclass
class Prepared:
    spec: RunSpec
    allocator: object
    workload: object
    executor: object
    gpu_profile: str | None  # the spec's, or on hf with engine.clock=virtual the profile that times the steps
    tiers: object = None  # allocators.tiers.TierStack when offload is on

    @property
    def geometry(self) -> KVGeometry:
        return self.spec.geometry

    @property
    def num_slots(self) -> int:
        return self.spec.num_slots

    @property
    def kv_bytes(self) -> int:
        return self.spec.kv_bytes

    @property
    def device(self) -> str:
        return self.spec.device


def _profiled_step(cfg: DictConfig):
    """The forward whose peak the modelled vLLM profiles before sizing the pool (its system's)."""
    from kvbench.sim.cost_model import profiled_step  # start-up time: the cost model only where a pool is sized

    eng, system = cfg.engine, cfg.get("system")
    memory_profile = (system.get("memory_profile") if system is not None else None) or "vllm-v1"
    return profiled_step(int(cfg.model.max_model_len), int(eng.max_num_batched_tokens), int(eng.max_num_seqs),
                         bool(eng.chunked_prefill), str(memory_profile))


def _kv_bytes(cfg: DictConfig, geometry: KVGeometry) -> tuple[int, str, str | None]:
    """KV memory in bytes, the device, and the GPU profile name (sim) for this run."""
    eng = cfg.engine
    if cfg.backend.name == "sim":
        from kvbench.sim.cost_model import kv_cache_bytes  # start-up time: the cost model's tables

        if eng.kv_cache_bytes is not None:
            kv = int(eng.kv_cache_bytes)
        else:
            try:
                kv = int(kv_cache_bytes(cfg.model, cfg.gpu, eng.gpu_memory_utilization, _profiled_step(cfg),
                                        geometry=geometry))
            except ValueError as exc:
                raise ConfigError(f"model {cfg.model.name} on gpu {cfg.gpu.name}: {exc}") from None
        return kv, "sim", str(cfg.gpu.name)
    from kvbench.executors.hf import resolve_device, default_kv_cache_bytes  # start-up time: torch, hf only

    device = resolve_device(eng.device)
    kv = (int(eng.kv_cache_bytes) if eng.kv_cache_bytes is not None
          else int(default_kv_cache_bytes(cfg, device, geometry=geometry)))
    return kv, device, None


def run_spec(cfg: DictConfig, kv_bytes: int | None = None, geometry: KVGeometry | None = None) -> RunSpec:
    """The run spec of a composed, validated config: the one place that derives the pool size, from
    the model's KV geometry (``model_geometry``, or ``geometry`` when the caller derived it already)
    and the configured or default KV memory (``kv_bytes`` replaces that, for checks).

    A job builds its spec once (``check_job`` or ``prepare``, handed on to ``run``). The pre-check
    builds each job's with this same function before Hydra starts, but cannot hand it over: Hydra
    composes the job's config anew, and a launcher (joblib, Ray, submitit) runs the job in another
    process; on hf the default pool also needs the device's free memory, read in the job."""
    geometry = geometry if geometry is not None else model_geometry(cfg.model)
    kv, device, gpu_profile = _kv_bytes(cfg, geometry)
    block_size = cfg.allocator.get("block_size")
    return RunSpec(geometry=geometry, num_slots=pool_slots(cfg, geometry, kv if kv_bytes is None else kv_bytes),
                   block_size=block_size if isinstance(block_size, int) else None,  # a bad one: the allocator says so
                   scheduler=scheduler_limits(cfg, geometry), device=device, gpu_profile=gpu_profile,
                   workload=workload_summary(cfg))


def _allocator(cfg: DictConfig, spec: RunSpec):
    """The run's allocator over the spec's pool."""
    geometry = spec.geometry
    knobs = {k: v for k, v in OmegaConf.to_container(cfg.allocator).items() if k != "name" and v is not None}
    if cfg.allocator.name in ("contiguous", "buddy"):
        knobs.setdefault("max_model_len", int(cfg.model.max_model_len))
    if cfg.allocator.name == "vattention":  # one token of one layer's K (or V) tensor
        knobs.setdefault("token_bytes", geometry.num_kv_heads * geometry.head_size * geometry.dtype_bytes)
    if cfg.allocator.name == "paged_window":
        _window_knob(cfg, geometry, knobs)
    group_knobs(cfg, geometry, knobs)
    build = build_peer if cfg.allocator.name in PEERS else build_allocator
    try:
        return build(cfg.allocator.name, spec.num_slots, debug=bool(cfg.engine.debug), **knobs)
    except AllocatorError as exc:
        raise ConfigError(f"allocator ({cfg.allocator.name}): {exc}") from None


def _window_knob(cfg: DictConfig, geometry: KVGeometry, knobs: dict) -> None:
    """paged_window: the window defaults to the model's (every layer must slide); sim only,
    recompute preemption only (swap and the hf attention read every block-table entry)."""
    if cfg.backend.name != "sim":
        raise ConfigError("allocator paged_window runs on backend=sim only (the hf attention reads dropped blocks)")
    if str(cfg.engine.preemption) != "recompute":
        raise ConfigError("allocator paged_window needs engine.preemption=recompute (swap copies dropped blocks)")
    if "window" not in knobs:
        if geometry.max_window is None:
            raise ConfigError(f"allocator paged_window: model {cfg.model.name} does not slide on every layer; "
                              "set allocator.window explicitly")
        knobs["window"] = geometry.max_window


def prepare(cfg: DictConfig, spec: RunSpec | None = None) -> Prepared:
    """Everything a run needs, built and checked; raises a kvbench error on bad input. ``spec``:
    the job's run spec when its checks built it already (``check_job``), else built here."""
    resolve_seeds(cfg)
    validate(cfg)
    spec = spec if spec is not None else run_spec(cfg)
    allocator = _allocator(cfg, spec)
    gpu_profile = spec.gpu_profile
    tiers = build_tiers(cfg, spec.geometry.bytes_per_slot, spec.kv_bytes, allocator.block_size,
                        bool(cfg.engine.debug))
    if tiers is not None:
        allocator.attach_tiers(tiers)
    workload = _workload(cfg)
    check_priorities(cfg, workload.requests)
    if cfg.backend.name == "sim":
        from kvbench.executors.sim import SimExecutor  # start-up time: sim only

        executor = SimExecutor(cfg.model, cfg.gpu, seed=int(cfg.seed), system_cfg=cfg.get("system"),
                               geometry=spec.geometry)
    else:
        from kvbench.executors.hf import HFExecutor  # start-up time: torch, hf only

        executor = HFExecutor(cfg.model, cfg.engine, num_slots=spec.num_slots, block_size=allocator.block_size,
                              device=spec.device, seed=int(cfg.seed), backend_cfg=cfg.backend, gpu_cfg=cfg.gpu,
                              system_cfg=cfg.get("system"), geometry=spec.geometry,
                              kv_layout=allocator.attention_layout() if getattr(allocator, "per_group_tables", False)
                              else None)
        if executor.cost is not None:
            gpu_profile = str(cfg.gpu.name)  # the profile that times the steps
        if tiers is not None:  # the host tier's chunks as real K/V in host memory
            tiers.track_copies()
            executor.attach_host_tier(tiers.host.capacity_bytes // tiers.host.chunk_bytes, tiers.chunk_blocks)
    return Prepared(spec, allocator, workload, executor, gpu_profile, tiers)


_WORKLOADS: dict[str, object] = {}  # built by the pre-check, reused by the run in the same process


def _workload(cfg: DictConfig):
    """The run's request stream; built once per process for the same workload and model limits."""
    key = repr((OmegaConf.to_container(cfg.workload, resolve=True), int(cfg.model.vocab_size),
                int(cfg.model.max_model_len), cfg.model.get("tokenizer")))
    if key not in _WORKLOADS:
        _WORKLOADS.clear()
        _WORKLOADS[key] = build_workload(cfg.workload, vocab_size=int(cfg.model.vocab_size),
                                         max_model_len=int(cfg.model.max_model_len),
                                         tokenizer_name=cfg.model.get("tokenizer"))
    return _WORKLOADS[key]
