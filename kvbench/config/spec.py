"""The run spec: what a composed config fixes about one run, derived once and frozen.

``kvbench.run.prepare.run_spec`` builds it (the one place that derives the model's KV geometry and
the pool size); the pre-check's pool check, the allocator, the executor, the scheduler and the
summary row all read it instead of deriving their own.
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
class RunSpec:
    """One run's model geometry, KV pool and scheduler limits."""

    geometry: KVGeometry
    num_slots: int  # the KV pool, a whole number of blocks
    block_size: int | None  # allocator.block_size as configured (None: the allocator's own)
    scheduler: SchedulerLimits
    device: str  # sim, cpu or cuda
    gpu_profile: str | None  # the profile that times the steps (sim; hf with engine.clock=virtual: set later)

    @property
    def kv_bytes(self) -> int:
        """The pool's bytes: its slots times one slot's K and V over all layers."""
        return self.num_slots * self.geometry.bytes_per_slot


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
