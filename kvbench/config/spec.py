"""The run spec: what a composed config fixes about one run, derived once and frozen.

``kvbench.run.prepare.run_spec`` builds it (the one place that derives the pool size);
``model_geometry`` here is the one derivation of a model's KV geometry, which ``run_spec`` calls
and which commands that size a pool or a cost model outside a run (``kvbench.sim.validate``,
scripts, tests) call too. The pre-check's pool check, the allocator, the executor, the cost model,
the scheduler and the summary row all read the spec's geometry instead of deriving their own.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvbench.config.errors import ConfigError
from kvbench.geometry import KVGeometry


@dataclass(frozen=True)
class SchedulerLimits:
    """The engine knobs the scheduler obeys."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    chunked_prefill: bool
    preemption: str
    swap_slots: int  # the host pool for swap preemption, in slots of this model


@dataclass(frozen=True)
class WorkloadSummary:
    """What the config says of the request stream before it is generated (the generated stream's
    own counts, e.g. a windowed trace's, stay the workload's: ``Workload.requests``, ``meta``)."""

    name: str
    num_requests: int | None  # as configured (a trace or a conversation set may yield another count)
    request_rate: float | None  # requests/s as configured (inf: all at t=0; None: a trace's own arrivals)
    duration_s: float | None  # arrivals over this many seconds instead of num_requests (None: not set)
    max_concurrency: int | None  # the gate: at most this many requests in flight
    burstiness: float
    n: int  # parallel samples per request
    beam_width: int
    prefix_len: int | None  # a shared prefix's tokens (shared-prefix workloads)


@dataclass(frozen=True)
class RunSpec:
    """One run's model geometry, KV pool and scheduler limits."""

    geometry: KVGeometry
    num_slots: int  # the KV pool, a whole number of blocks
    block_size: int | None  # allocator.block_size as configured (None: the allocator's own)
    scheduler: SchedulerLimits
    device: str  # sim, cpu or cuda
    gpu_profile: str | None  # the profile that times the steps (sim; hf with engine.clock=virtual: set later)
    workload: WorkloadSummary

    @property
    def kv_bytes(self) -> int:
        """The pool's bytes: its slots times one slot's K and V over all layers."""
        return self.num_slots * self.geometry.bytes_per_slot


def model_geometry(model) -> KVGeometry:
    """The model config's KV geometry: the only call of ``KVGeometry.from_model_cfg`` outside tests
    (``tests/test_import_cycles.py`` checks), so every byte count starts from one derivation."""
    return KVGeometry.from_model_cfg(model)


def pool_slots(cfg, geometry: KVGeometry, kv_bytes: int) -> int:
    """The slots ``kv_bytes`` hold, rounded down to whole blocks; ConfigError under one block."""
    block_size = cfg.allocator.get("block_size") or 1
    num_slots = geometry.slots_for(kv_bytes)
    if isinstance(block_size, int) and block_size > 0:
        if num_slots < block_size:
            raise ConfigError(f"engine.kv_cache_bytes: {kv_bytes} bytes hold {num_slots} slots of {cfg.model.name} "
                              f"({geometry.bytes_per_slot} bytes each), less than one block of {block_size}")
        num_slots = num_slots // block_size * block_size
    return num_slots


def scheduler_limits(cfg, geometry: KVGeometry) -> SchedulerLimits:
    eng = cfg.engine
    return SchedulerLimits(
        max_num_batched_tokens=int(eng.max_num_batched_tokens),
        max_num_seqs=int(eng.max_num_seqs),
        max_model_len=int(cfg.model.max_model_len),
        chunked_prefill=bool(eng.chunked_prefill),
        preemption=str(eng.preemption),
        swap_slots=int(float(eng.swap_space_bytes or 0) // geometry.bytes_per_slot),
    )


def workload_summary(cfg) -> WorkloadSummary:
    """The request stream as configured (``cfg.workload``), read before anything is generated."""
    wl = cfg.workload
    num, rate, duration = wl.get("num_requests"), wl.get("request_rate"), wl.get("duration_s")
    return WorkloadSummary(
        name=str(wl.name),
        num_requests=int(num) if num is not None else None,
        request_rate=float(rate) if rate is not None else None,
        duration_s=float(duration) if duration is not None else None,
        max_concurrency=wl.get("max_concurrency"),
        burstiness=float(wl.get("burstiness", 1.0)),
        n=int(wl.get("n", 1)),
        beam_width=int(wl.get("beam_width", 1)),
        prefix_len=int(wl.prefix_len) if wl.get("prefix_len") is not None else None,
    )
