"""Paged KV-cache kernels (Triton) and their torch references.

Pool layout, one pool per layer: key_cache and value_cache are [num_blocks, block_size,
num_kv_heads, head_size], a view of [num_slots, num_kv_heads, head_size] with slot = block *
block_size + offset; value_cache's head size may differ from key_cache's (MLA; details in
``kernels.attention``).

    paged_attention(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale,
                    *, out=None, num_splits=None) -> out
    store_kv(key, value, key_cache, value_cache, slot_mapping)
    copy_slots(key_cache, value_cache, src_slots, dst_slots)

``get_ops("triton" | "torch")`` returns those three for the chosen backend. Triton is imported
only when a Triton op is first used, so the torch backend works where Triton is absent, and
TRITON_INTERPRET=1 (CPU) takes effect if it is set before that first use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kernels.pool import apply_copy_ops, gather_slots, plan_copies, scatter_slots
from kernels.reference import copy_slots_ref, paged_attention_ref, store_kv_ref

BACKENDS = ("triton", "torch")

__all__ = [
    "BACKENDS", "KernelOps", "get_ops",
    "paged_attention", "store_kv", "copy_slots",
    "paged_attention_ref", "store_kv_ref", "copy_slots_ref",
    "plan_copies", "apply_copy_ops", "gather_slots", "scatter_slots",
]

_TRITON_OPS = {"paged_attention": "kernels.attention", "store_kv": "kernels.cache_ops",
               "copy_slots": "kernels.cache_ops"}


def __getattr__(name: str):
    if name in _TRITON_OPS:
        import importlib  # optional dependency: triton, loaded on first use of a Triton op

        op = getattr(importlib.import_module(_TRITON_OPS[name]), name)
        globals()[name] = op  # later lookups skip __getattr__
        return op
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class KernelOps:
    """The three pool operations of one backend, as an executor calls them."""

    name: str
    paged_attention: Callable
    store_kv: Callable
    copy_slots: Callable


def get_ops(backend: str) -> KernelOps:
    if backend == "torch":
        return KernelOps("torch", paged_attention_ref, store_kv_ref, copy_slots_ref)
    if backend == "triton":
        from kernels.attention import paged_attention  # optional dependency: triton, for backend triton only
        from kernels.cache_ops import copy_slots, store_kv

        return KernelOps("triton", paged_attention, store_kv, copy_slots)
    raise ValueError(f"kernel backend must be one of {list(BACKENDS)}, got {backend!r}")
