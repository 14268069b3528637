"""Pool-level helpers in plain torch: turn CopyOps into copy calls, swap slots to and from the host.

A CopyOp (from the allocators) is ``(src, dst, length)``: copy slots [src, src + length) to
[dst, dst + length). A list of them means "apply one after another", and ranges may overlap (a
region that grows by moving onto itself). ``plan_copies`` turns such a list into calls of
``copy_slots``, each of which runs its slot pairs in parallel and is therefore only given pairs
that cannot see each other's writes; applied in order, the calls equal the sequential ops.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from kernels.checks import check_pool, require

Interval = tuple[int, int]  # [start, end)


def _as_triple(op) -> tuple[int, int, int]:
    if hasattr(op, "src"):
        return int(op.src), int(op.dst), int(op.length)
    src, dst, length = op
    return int(src), int(dst), int(length)


def _pieces(src: int, dst: int, length: int) -> list[tuple[int, int, int]]:
    """Split a copy whose source and destination overlap into non-overlapping pieces, ordered
    like memmove (front first when moving down, back first when moving up)."""
    gap = abs(dst - src)
    if gap >= length:
        return [(src, dst, length)]
    starts = range(0, length, gap)
    if dst > src:
        starts = reversed(starts)
    return [(src + i, dst + i, min(gap, length - i)) for i in starts]


def _hits(interval: Interval, others: list[Interval]) -> bool:
    return any(interval[0] < end and start < interval[1] for start, end in others)


def plan_copies(ops: Iterable, device: torch.device | str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Ordered CopyOps -> list of (src_slots, dst_slots) int64 tensors for ``copy_slots``."""
    calls: list[tuple[list[int], list[int]]] = []
    reads: list[Interval] = []
    writes: list[Interval] = []
    src_slots: list[int] = []
    dst_slots: list[int] = []
    for op in ops:
        src, dst, length = _as_triple(op)
        require(src >= 0 and dst >= 0 and length >= 0, f"copy op {op!r} has a negative field")
        if length == 0 or src == dst:
            continue
        for s, d, n in _pieces(src, dst, length):
            read, write = (s, s + n), (d, d + n)
            if _hits(read, writes) or _hits(write, reads) or _hits(write, writes):
                calls.append((src_slots, dst_slots))
                reads, writes, src_slots, dst_slots = [], [], [], []
            reads.append(read)
            writes.append(write)
            src_slots.extend(range(s, s + n))
            dst_slots.extend(range(d, d + n))
    if src_slots:
        calls.append((src_slots, dst_slots))
    return [(torch.tensor(s, dtype=torch.int64, device=device), torch.tensor(d, dtype=torch.int64, device=device))
            for s, d in calls]


def apply_copy_ops(key_cache: torch.Tensor, value_cache: torch.Tensor, ops: Iterable, copy_fn=None) -> None:
    """Apply CopyOps in order to one layer's pool with ``copy_fn`` (default: the Triton ``copy_slots``)."""
    if copy_fn is None:
        from kernels.cache_ops import copy_slots as copy_fn  # optional dependency: triton, only for the default copy
    for src, dst in plan_copies(ops, key_cache.device):
        copy_fn(key_cache, value_cache, src, dst)


def _slot_index(slots, pool_block_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    slots = torch.as_tensor(slots, dtype=torch.int64).to(device)
    require(slots.dim() == 1, f"slots must be one-dimensional, got shape {tuple(slots.shape)}")
    return slots // pool_block_size, slots % pool_block_size


def gather_slots(key_cache: torch.Tensor, value_cache: torch.Tensor, slots) -> tuple[torch.Tensor, torch.Tensor]:
    """Swap out: the K and V of ``slots`` (in order) as two [n, Hkv, D] host tensors."""
    pool = check_pool(key_cache, value_cache)
    blocks, offsets = _slot_index(slots, pool.block_size, key_cache.device)
    return key_cache[blocks, offsets].cpu(), value_cache[blocks, offsets].cpu()


def scatter_slots(key_cache: torch.Tensor, value_cache: torch.Tensor, slots, key: torch.Tensor,
                  value: torch.Tensor) -> None:
    """Swap in: write host (or device) K and V rows [n, Hkv, D] into ``slots`` of the pool."""
    pool = check_pool(key_cache, value_cache)
    blocks, offsets = _slot_index(slots, pool.block_size, key_cache.device)
    for name, rows, size in (("key", key, pool.head_size), ("value", value, pool.v_head_size)):
        expected = (blocks.shape[0], pool.num_kv_heads, size)
        require(tuple(rows.shape) == expected,
                f"{name} must be {list(expected)} for these slots, got {list(rows.shape)}")
        require(rows.dtype == key_cache.dtype,
                f"{name} dtype {rows.dtype} differs from the cache dtype {key_cache.dtype}")
    key_cache[blocks, offsets] = key.to(key_cache.device, non_blocking=True)
    value_cache[blocks, offsets] = value.to(value_cache.device, non_blocking=True)
