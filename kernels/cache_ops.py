"""Triton kernels that write the KV pool: store new tokens, copy slots (CoW, moves).

Pool layout as in ``kernels.attention``: [num_blocks, block_size, num_kv_heads, head_size], slot =
block * block_size + offset; V's head size may differ from K's (MLA). One program moves the K and
V of one token slot (all KV heads); offsets are int64.
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.attention import _check_device, device_guard
from kernels.checks import check_copy_args, check_store_args


@triton.jit
def _store_kv_kernel(
    key_ptr,  # [T, Hkv, HEAD_SIZE]
    value_ptr,  # [T, Hkv, V_HEAD_SIZE]
    key_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, HEAD_SIZE]
    value_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, V_HEAD_SIZE]
    slot_mapping_ptr,  # [T] int64, negative = skip
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_kcb, stride_kcs, stride_kch,
    stride_vcb, stride_vcs, stride_vch,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    V_HEAD_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HEAD_PAD: tl.constexpr,  # next power of two >= max(HEAD_SIZE, V_HEAD_SIZE)
    BLOCK_SIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    heads = tl.arange(0, HEADS_PAD)[:, None]  # [HEADS_PAD, 1]
    dims = tl.arange(0, HEAD_PAD)[None, :]  # [1, HEAD_PAD]
    mask = (heads < NUM_KV_HEADS) & (dims < HEAD_SIZE)  # [HEADS_PAD, HEAD_PAD]
    v_mask = (heads < NUM_KV_HEADS) & (dims < V_HEAD_SIZE)
    k = tl.load(key_ptr + token * stride_kt + heads * stride_kh + dims, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + heads * stride_vh + dims, mask=v_mask)
    tl.store(key_cache_ptr + block * stride_kcb + offset * stride_kcs + heads * stride_kch + dims, k, mask=mask)
    tl.store(value_cache_ptr + block * stride_vcb + offset * stride_vcs + heads * stride_vch + dims, v, mask=v_mask)


@triton.jit
def _copy_slots_kernel(
    key_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, HEAD_SIZE]
    value_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, V_HEAD_SIZE]
    src_slots_ptr,  # [N] int64
    dst_slots_ptr,  # [N] int64
    stride_kcb, stride_kcs, stride_kch,
    stride_vcb, stride_vcs, stride_vch,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    V_HEAD_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HEAD_PAD: tl.constexpr,  # next power of two >= max(HEAD_SIZE, V_HEAD_SIZE)
    BLOCK_SIZE: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64)
    src = tl.load(src_slots_ptr + i).to(tl.int64)
    dst = tl.load(dst_slots_ptr + i).to(tl.int64)
    heads = tl.arange(0, HEADS_PAD)[:, None]  # [HEADS_PAD, 1]
    dims = tl.arange(0, HEAD_PAD)[None, :]  # [1, HEAD_PAD]
    mask = (heads < NUM_KV_HEADS) & (dims < HEAD_SIZE)
    v_mask = (heads < NUM_KV_HEADS) & (dims < V_HEAD_SIZE)
    k_src = (src // BLOCK_SIZE) * stride_kcb + (src % BLOCK_SIZE) * stride_kcs
    k_dst = (dst // BLOCK_SIZE) * stride_kcb + (dst % BLOCK_SIZE) * stride_kcs
    v_src = (src // BLOCK_SIZE) * stride_vcb + (src % BLOCK_SIZE) * stride_vcs
    v_dst = (dst // BLOCK_SIZE) * stride_vcb + (dst % BLOCK_SIZE) * stride_vcs
    k = tl.load(key_cache_ptr + k_src + heads * stride_kch + dims, mask=mask)
    tl.store(key_cache_ptr + k_dst + heads * stride_kch + dims, k, mask=mask)
    v = tl.load(value_cache_ptr + v_src + heads * stride_vch + dims, mask=v_mask)
    tl.store(value_cache_ptr + v_dst + heads * stride_vch + dims, v, mask=v_mask)


def _row_meta(pool) -> dict:
    heads_pad = triton.next_power_of_2(pool.num_kv_heads)
    head_pad = triton.next_power_of_2(max(pool.head_size, pool.v_head_size))
    return dict(NUM_KV_HEADS=pool.num_kv_heads, HEAD_SIZE=pool.head_size, V_HEAD_SIZE=pool.v_head_size,
                HEADS_PAD=heads_pad,
                HEAD_PAD=head_pad, BLOCK_SIZE=pool.block_size,
                num_warps=4 if heads_pad * head_pad <= 4096 else 8)


def store_kv(key, value, key_cache, value_cache, slot_mapping):
    """Write token t's K [T, Hkv, D] and V [T, Hkv, Dv] into pool slot slot_mapping[t] (int64; negative = skip)."""
    pool = check_store_args(key, value, key_cache, value_cache, slot_mapping)
    _check_device(key_cache)
    if key.shape[0] == 0:
        return
    kernel, grid, kwargs = store_kv_launch(key, value, key_cache, value_cache, slot_mapping, pool)
    with device_guard(key_cache):
        kernel[grid](**kwargs)


def store_kv_launch(key, value, key_cache, value_cache, slot_mapping, pool) -> tuple:
    return _store_kv_kernel, (key.shape[0],), dict(
        key_ptr=key, value_ptr=value, key_cache_ptr=key_cache, value_cache_ptr=value_cache,
        slot_mapping_ptr=slot_mapping,
        stride_kt=key.stride(0), stride_kh=key.stride(1),
        stride_vt=value.stride(0), stride_vh=value.stride(1),
        stride_kcb=key_cache.stride(0), stride_kcs=key_cache.stride(1), stride_kch=key_cache.stride(2),
        stride_vcb=value_cache.stride(0), stride_vcs=value_cache.stride(1), stride_vch=value_cache.stride(2),
        **_row_meta(pool),
    )


def copy_slots(key_cache, value_cache, src_slots, dst_slots):
    """Copy the K and V of slot src_slots[i] to dst_slots[i] (int64). Within one call the source and
    destination sets must be disjoint (copies run in parallel); ``kernels.pool.apply_copy_ops``
    turns ordered, possibly overlapping CopyOps into such calls."""
    pool = check_copy_args(key_cache, value_cache, src_slots, dst_slots)
    _check_device(key_cache)
    if src_slots.shape[0] == 0:
        return
    kernel, grid, kwargs = copy_slots_launch(key_cache, value_cache, src_slots, dst_slots, pool)
    with device_guard(key_cache):
        kernel[grid](**kwargs)


def copy_slots_launch(key_cache, value_cache, src_slots, dst_slots, pool) -> tuple:
    return _copy_slots_kernel, (src_slots.shape[0],), dict(
        key_cache_ptr=key_cache, value_cache_ptr=value_cache,
        src_slots_ptr=src_slots, dst_slots_ptr=dst_slots,
        stride_kcb=key_cache.stride(0), stride_kcs=key_cache.stride(1), stride_kch=key_cache.stride(2),
        stride_vcb=value_cache.stride(0), stride_vcs=value_cache.stride(1), stride_vch=value_cache.stride(2),
        **_row_meta(pool),
    )
