"""Argument checks shared by the Triton launchers and the torch references.

Shape, stride, dtype and device checks are cheap (host metadata only) and always run. Checks of
tensor *values* (block ids in range, ``query_start_loc`` consistent with the query, slots inside
the pool) read device memory and would synchronise every call, so they run only when the debug
switch is on: ``KVBENCH_DEBUG_CHECKS=1`` in the environment or ``set_debug_checks(True)``.
Every failure is a ``ValueError`` whose message names the argument and what was expected.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_SIZE = 256
MAX_SPLITS = 256

_debug_checks = os.environ.get("KVBENCH_DEBUG_CHECKS", "0") not in ("", "0")


def set_debug_checks(enabled: bool) -> bool:
    """Turn the value checks on or off; returns the previous setting."""
    global _debug_checks
    previous, _debug_checks = _debug_checks, bool(enabled)
    return previous


def debug_checks_enabled() -> bool:
    return _debug_checks


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True, slots=True)
class PoolShape:
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_size: int  # K's (and the query's)
    v_head_size: int  # V's (and the output's); MLA's differs from K's

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class AttentionShape:
    num_tokens: int  # T: new query tokens of all sequences
    num_heads: int  # Hq
    num_seqs: int  # B
    max_blocks: int  # width of the block table
    pool: PoolShape

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_heads // self.pool.num_kv_heads


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_tensor(name: str, tensor, layout: str, dims: int, *, dtype: torch.dtype | None = None,
                  device: torch.device | None = None, dense_last: bool = True) -> None:
    """Type, rank, dtype (exact or one of SUPPORTED_DTYPES), device, and a contiguous last dimension."""
    require(isinstance(tensor, torch.Tensor), f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    require(tensor.dim() == dims, f"{name} must be {layout}, got shape {list(tensor.shape)}")
    if dtype is None:
        require(tensor.dtype in SUPPORTED_DTYPES,
                f"{name} dtype must be float32, float16 or bfloat16, got {_dtype_name(tensor.dtype)}")
    else:
        require(tensor.dtype == dtype, f"{name} must be {_dtype_name(dtype)}, got {_dtype_name(tensor.dtype)}")
    if device is not None:
        require(tensor.device == device, f"{name} is on {tensor.device}, the cache on {device}")
    if dense_last and tensor.dim():
        require(tensor.stride(-1) == 1, f"{name} must be contiguous in its last dimension (stride(-1) == 1), "
                                        f"got strides {tensor.stride()}")


def _same(what: str, a, b) -> None:
    require(a == b, f"key_cache and value_cache {what} differ: {a} vs {b}")


def check_pool(key_cache: torch.Tensor, value_cache: torch.Tensor) -> PoolShape:
    """The pool's shape; K and V may have different head sizes (MLA), nothing else may differ."""
    layout = "[num_blocks, block_size, num_kv_heads, head_size]"
    _check_tensor("key_cache", key_cache, layout, 4)
    _check_tensor("value_cache", value_cache, layout, 4)
    _same("shapes", list(key_cache.shape[:3]), list(value_cache.shape[:3]))
    _same("dtypes", _dtype_name(key_cache.dtype), _dtype_name(value_cache.dtype))
    _same("devices", key_cache.device, value_cache.device)
    num_blocks, block_size, num_kv_heads, head_size = key_cache.shape
    v_head_size = value_cache.shape[3]
    require(block_size >= 1 and num_kv_heads >= 1,
            f"cache block_size and num_kv_heads must be >= 1, got shape {list(key_cache.shape)}")
    for name, size in (("head_size", head_size), ("value head_size", v_head_size)):
        require(1 <= size <= MAX_HEAD_SIZE, f"{name} must be in [1, {MAX_HEAD_SIZE}], got {size}")
    return PoolShape(num_blocks, block_size, num_kv_heads, head_size, v_head_size)


def _check_like(name: str, tensor, like: torch.Tensor, like_name: str) -> None:
    """Same dtype and device as ``like`` (the query or the cache)."""
    require(tensor.dtype == like.dtype,
            f"{name} dtype {_dtype_name(tensor.dtype)} differs from the {like_name} dtype {_dtype_name(like.dtype)}")
    require(tensor.device == like.device, f"{name} is on {tensor.device}, the {like_name} on {like.device}")


def check_attention_args(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                         scale, out, num_splits, window=None, softcap=None) -> AttentionShape:
    pool = check_pool(key_cache, value_cache)
    device = key_cache.device
    _check_tensor("query", query, "[num_tokens, num_heads, head_size]", 3)
    _check_like("query", query, key_cache, "cache")
    num_tokens, num_heads, head_size = query.shape
    require(head_size == pool.head_size,
            f"query head_size {head_size} differs from the cache head_size {pool.head_size}")
    require(num_heads >= 1 and num_heads % pool.num_kv_heads == 0,
            f"num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({pool.num_kv_heads})")

    _check_tensor("block_tables", block_tables, "[num_seqs, max_blocks]", 2, dtype=torch.int32, device=device)
    _check_tensor("context_lens", context_lens, "[num_seqs]", 1, dtype=torch.int32, device=device)
    _check_tensor("query_start_loc", query_start_loc, "[num_seqs + 1]", 1, dtype=torch.int32, device=device)
    num_seqs = context_lens.shape[0]
    require(block_tables.shape[0] == num_seqs,
            f"block_tables has {block_tables.shape[0]} rows, context_lens {num_seqs} sequences")
    require(query_start_loc.shape[0] == num_seqs + 1,
            f"query_start_loc must have num_seqs + 1 = {num_seqs + 1} entries, got {query_start_loc.shape[0]}")
    require(num_seqs > 0 or num_tokens == 0, f"query has {num_tokens} tokens but there are no sequences")

    require(isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale),
            f"scale must be a finite Python number, got {scale!r}")
    require(window is None or (isinstance(window, int) and not isinstance(window, bool) and window >= 1),
            f"window must be None or an integer >= 1 (keys per query, itself included), got {window!r}")
    require(softcap is None or (isinstance(softcap, (int, float)) and not isinstance(softcap, bool)
                                and math.isfinite(softcap) and softcap > 0),
            f"softcap must be None or a finite number > 0, got {softcap!r}")
    if out is not None:
        _check_tensor("out", out, "[num_tokens, num_heads, value head_size]", 3)
        expected = [num_tokens, num_heads, pool.v_head_size]
        require(list(out.shape) == expected, f"out shape {list(out.shape)} differs from {expected} "
                                             "(query tokens and heads, the value head size)")
        _check_like("out", out, query, "query")
    if num_splits is not None:
        require(isinstance(num_splits, int) and not isinstance(num_splits, bool) and 1 <= num_splits <= MAX_SPLITS,
                f"num_splits must be None or an integer in [1, {MAX_SPLITS}], got {num_splits!r}")

    shape = AttentionShape(num_tokens, num_heads, num_seqs, block_tables.shape[1], pool)
    if _debug_checks:
        _check_attention_values(shape, block_tables, context_lens, query_start_loc)
    return shape


def _check_attention_values(shape: AttentionShape, block_tables, context_lens, query_start_loc) -> None:
    qsl = query_start_loc.cpu().long()
    ctx = context_lens.cpu().long()
    q_lens = qsl[1:] - qsl[:-1]
    require(int(qsl[0]) == 0, f"query_start_loc[0] must be 0, got {int(qsl[0])}")
    require(bool((q_lens >= 0).all()), "query_start_loc must be non-decreasing")
    require(int(qsl[-1]) == shape.num_tokens,
            f"query_start_loc[-1] ({int(qsl[-1])}) must equal the number of query tokens ({shape.num_tokens})")
    require(bool((q_lens <= ctx).all()),
            "each context_lens[b] must be >= its query length (the context includes the new tokens)")
    capacity = shape.max_blocks * shape.pool.block_size
    require(bool((ctx <= capacity).all()),
            f"context_lens exceed the block table capacity ({shape.max_blocks} blocks x {shape.pool.block_size})")
    bt = block_tables.cpu().long()
    for b in range(shape.num_seqs):
        used = bt[b, : -(-int(ctx[b]) // shape.pool.block_size)]
        require(bool(((used >= 0) & (used < shape.pool.num_blocks)).all()),
                f"block_tables row {b} uses a block outside [0, {shape.pool.num_blocks})")


def check_store_args(key, value, key_cache, value_cache, slot_mapping) -> PoolShape:
    pool = check_pool(key_cache, value_cache)
    for name, new, size in (("key", key, pool.head_size), ("value", value, pool.v_head_size)):
        layout = f"[num_tokens, {pool.num_kv_heads}, {size}] to match the cache"
        _check_tensor(name, new, layout, 3)
        require(tuple(new.shape[1:]) == (pool.num_kv_heads, size), f"{name} must be {layout}, got shape {list(new.shape)}")
        _check_like(name, new, key_cache, "cache")
    require(key.shape[0] == value.shape[0], f"key and value token counts differ: {key.shape[0]} vs {value.shape[0]}")
    _check_tensor("slot_mapping", slot_mapping, "[num_tokens]", 1, dtype=torch.int64, device=key_cache.device)
    require(slot_mapping.shape[0] == key.shape[0],
            f"slot_mapping has {slot_mapping.shape[0]} entries, key {key.shape[0]} tokens")
    if _debug_checks and slot_mapping.numel():
        require(int(slot_mapping.max()) < pool.num_slots, f"slot_mapping has a slot >= num_slots ({pool.num_slots})")
        valid = slot_mapping[slot_mapping >= 0]
        require(valid.unique().numel() == valid.numel(), "slot_mapping writes the same slot twice")
    return pool


def check_copy_args(key_cache, value_cache, src_slots, dst_slots) -> PoolShape:
    pool = check_pool(key_cache, value_cache)
    _check_tensor("src_slots", src_slots, "[n]", 1, dtype=torch.int64, device=key_cache.device)
    _check_tensor("dst_slots", dst_slots, "[n]", 1, dtype=torch.int64, device=key_cache.device)
    require(src_slots.shape == dst_slots.shape,
            f"src_slots and dst_slots lengths differ: {src_slots.shape[0]} vs {dst_slots.shape[0]}")
    if _debug_checks and src_slots.numel():
        both = torch.cat([src_slots, dst_slots])
        require(int(both.min()) >= 0 and int(both.max()) < pool.num_slots,
                f"copy slots must lie in [0, {pool.num_slots})")
        require(not bool(torch.isin(dst_slots, src_slots).any()),
                "src_slots and dst_slots overlap; split the copy into ordered calls (kernels.plan_copies)")
        require(dst_slots.unique().numel() == dst_slots.numel(), "dst_slots writes the same slot twice")
    return pool
