"""KV-cache allocation strategies behind one seam (``allocators.base``).

``build(name, num_slots, **knobs)`` makes the strategy a config names:

    contiguous    ContiguousAllocator(num_slots, block_size=16, reserve="max", max_model_len=2048, double_chunk=16, debug=False)
    buddy         BuddyAllocator(num_slots, block_size=16, reserve="max", max_model_len=2048, min_order=0, double_chunk=16, debug=False)
    paged         PagedAllocator(num_slots, block_size=16, debug=False)
    paged_prefix  PagedPrefixAllocator(num_slots, block_size=16, debug=False)
"""
from __future__ import annotations

import inspect

from allocators.base import (
    Admission,
    Allocator,
    AllocatorError,
    CopyOp,
    Fit,
    MemoryUsage,
    check_length,
)
from allocators.buddy import BuddyAllocator
from allocators.contiguous import ContiguousAllocator
from allocators.paged import PagedAllocator
from allocators.paged_prefix import PagedPrefixAllocator
from allocators.region import RESERVE_POLICIES

STRATEGIES: dict[str, type[Allocator]] = {
    "contiguous": ContiguousAllocator,
    "buddy": BuddyAllocator,
    "paged": PagedAllocator,
    "paged_prefix": PagedPrefixAllocator,
}


def knobs_of(name: str) -> list[str]:
    """Keyword knobs a strategy takes besides num_slots."""
    params = inspect.signature(STRATEGIES[name].__init__).parameters
    return [p for p in params if p not in ("self", "num_slots")]


def build(name: str, num_slots: int, **knobs) -> Allocator:
    """The strategy ``name`` over ``num_slots`` slots; AllocatorError on an unknown name or knob."""
    cls = STRATEGIES.get(name)
    if cls is None:
        raise AllocatorError(f"unknown allocator {name!r}; allowed: {', '.join(STRATEGIES)}")
    allowed = knobs_of(name)
    unknown = sorted(set(knobs) - set(allowed))
    if unknown:
        raise AllocatorError(f"allocator {name!r} has no knob {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return cls(num_slots, **knobs)


__all__ = [
    "Admission",
    "Allocator",
    "AllocatorError",
    "BuddyAllocator",
    "ContiguousAllocator",
    "CopyOp",
    "Fit",
    "MemoryUsage",
    "PagedAllocator",
    "PagedPrefixAllocator",
    "RESERVE_POLICIES",
    "STRATEGIES",
    "build",
    "check_length",
    "knobs_of",
]
