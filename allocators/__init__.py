"""KV-cache allocation strategies behind one seam (``allocators.base``).

``build(name, num_slots, **knobs)`` makes the strategy a config names:

    contiguous    ContiguousAllocator(num_slots, block_size=16, reserve="max", max_model_len=2048, double_chunk=16, debug=False)
    buddy         BuddyAllocator(num_slots, block_size=16, reserve="max", max_model_len=2048, min_order=0, double_chunk=16, debug=False)
    paged         PagedAllocator(num_slots, block_size=16, debug=False)
    paged_prefix  PagedPrefixAllocator(num_slots, block_size=16, eviction="lru", debug=False)
    paged_window  PagedWindowAllocator(num_slots, block_size=16, window (tokens, required), debug=False)
    radix         RadixAllocator(num_slots, block_size=16, insert_running=True, eviction="lru", debug=False)
    uniform, hybrid_static, hybrid, lcm   mixed models (allocators.hybrid): num_slots, block_size=16,
                  groups (kind, size, token_bytes, state_bytes each), slot_bytes=None, prefill_chunk=2048, debug=False;
                  hybrid_static also ratios=None, max_model_len=2048
    hybrid_prefix, lcm_prefix   hybrid / lcm with prefix caching across layer groups (allocators.grouped_prefix):
                  as hybrid, plus state_checkpoint_every=0 (tokens; a multiple of block_size)
    vattention    VAttentionAllocator(num_slots, block_size=None (auto), page_bytes=2 MiB, token_bytes=2048, reclaim="unmap", debug=False)

block_size is a power of two for every strategy. ``eviction`` (paged_prefix, radix) orders the
cached blocks' eviction: ``lru``, ``arc``, ``lfu`` (with aging), ``slru`` (``allocators.cache_policy``). ``stats()`` keys, all strategies:
``prefix_hit_rate``, ``prefix_queries``, ``prefix_hits`` (None unless paged_prefix or radix; first
admissions only, the re-admissions of preempted sequences apart as ``preempted_*``, after
``note_preempted``: ``allocators.prefix_stats``),
``logical_slots`` (sum of num_tokens over live sequences: the slots they would hold without
sharing), ``physical_slots`` (distinct slots holding computed tokens, == usage().token),
``allocated_slots``, ``live_sequences``, ``copy_ops``, ``copied_slots`` (queued so far).
Extra: contiguous ``moves``, ``holes``, ``largest_hole_slots``; buddy ``moves``,
``largest_free_slots``; vattention ``page_maps``, ``page_unmaps``, ``tokens_per_page``; paged_prefix and radix ``cached_free_blocks``, ``evictions``;
paged_window ``window_freed_slots``.
sharing_saving_frac = 1 - physical_slots / logical_slots.
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
from allocators.hybrid import HybridAllocator, HybridStaticAllocator, LcmAllocator, UniformAllocator
from allocators.contiguous import ContiguousAllocator
from allocators.grouped_prefix import HybridPrefixAllocator, LcmPrefixAllocator
from allocators.paged import PagedAllocator
from allocators.paged_prefix import PagedPrefixAllocator
from allocators.paged_window import PagedWindowAllocator
from allocators.radix import RadixAllocator
from allocators.vattention import VAttentionAllocator
from allocators.region import RESERVE_POLICIES

STRATEGIES: dict[str, type[Allocator]] = {
    "contiguous": ContiguousAllocator,
    "buddy": BuddyAllocator,
    "paged": PagedAllocator,
    "paged_prefix": PagedPrefixAllocator,
    "paged_window": PagedWindowAllocator,
    "radix": RadixAllocator,
    "vattention": VAttentionAllocator,
    "uniform": UniformAllocator,
    "hybrid_static": HybridStaticAllocator,
    "hybrid": HybridAllocator,
    "lcm": LcmAllocator,
    "hybrid_prefix": HybridPrefixAllocator,
    "lcm_prefix": LcmPrefixAllocator,
}
GROUPED = ("uniform", "hybrid_static", "hybrid", "lcm", "hybrid_prefix", "lcm_prefix")  # take the model's layer groups


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
    "GROUPED",
    "HybridAllocator",
    "HybridPrefixAllocator",
    "LcmPrefixAllocator",
    "HybridStaticAllocator",
    "LcmAllocator",
    "UniformAllocator",
    "CopyOp",
    "Fit",
    "MemoryUsage",
    "PagedAllocator",
    "PagedPrefixAllocator",
    "PagedWindowAllocator",
    "RESERVE_POLICIES",
    "RadixAllocator",
    "VAttentionAllocator",
    "STRATEGIES",
    "build",
    "check_length",
    "knobs_of",
]
