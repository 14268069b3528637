"""Torch references for the paged KV-cache kernels, written for clarity, not speed.

Same signatures and pool layout as the Triton versions (see ``kernels.attention``): key_cache and
value_cache are [num_blocks, block_size, num_kv_heads, head_size]; slot = block * block_size +
offset. They run on any device and double as the ``torch`` backend of ``kernels.get_ops``.
"""
from __future__ import annotations

import torch

from kernels.checks import check_attention_args, check_copy_args, check_store_args


def paged_attention_ref(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale,
                        *, out=None, num_splits=None, window=None, softcap=None):
    """Causal attention of each sequence's new tokens over its cached K/V (see ``paged_attention``):
    scores = scale * q.k, then ``softcap * tanh(scores / softcap)`` when softcap is set, then the
    causal mask, narrowed to the last ``window`` positions (the query's own included) when set."""
    shape = check_attention_args(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                                 scale, out, num_splits, window, softcap)
    del num_splits  # the reference never splits
    if out is None:
        out = query.new_empty((query.shape[0], query.shape[1], shape.pool.v_head_size))
    block_size = shape.pool.block_size
    group = shape.num_queries_per_kv
    starts = query_start_loc.tolist()
    for b, context_len in enumerate(context_lens.tolist()):
        q = query[starts[b]: starts[b + 1]].float()  # [q_len, Hq, D]
        q_len = q.shape[0]
        if q_len == 0:
            continue
        positions = torch.arange(context_len, device=query.device)
        blocks = block_tables[b, positions // block_size].long()
        offsets = positions % block_size
        k = key_cache[blocks, offsets].float().repeat_interleave(group, dim=1)  # [context_len, Hq, D]
        v = value_cache[blocks, offsets].float().repeat_interleave(group, dim=1)  # [context_len, Hq, Dv]
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale  # [Hq, q_len, context_len]
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        q_positions = context_len - q_len + torch.arange(q_len, device=query.device)
        causal = positions[None, :] <= q_positions[:, None]  # [q_len, context_len]
        if window is not None:
            causal &= positions[None, :] > q_positions[:, None] - window
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[starts[b]: starts[b + 1]] = torch.einsum("hqk,khd->qhd", probs, v).to(out.dtype)
    return out


def store_kv_ref(key, value, key_cache, value_cache, slot_mapping):
    """Write token t's K and V into slot slot_mapping[t]; negative slots are skipped."""
    pool = check_store_args(key, value, key_cache, value_cache, slot_mapping)
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    key_cache[slots // pool.block_size, slots % pool.block_size] = key[keep]
    value_cache[slots // pool.block_size, slots % pool.block_size] = value[keep]


def copy_slots_ref(key_cache, value_cache, src_slots, dst_slots):
    """Copy the K and V of slot src_slots[i] to slot dst_slots[i], for every i."""
    pool = check_copy_args(key_cache, value_cache, src_slots, dst_slots)
    bs = pool.block_size
    for cache in (key_cache, value_cache):
        cache[dst_slots // bs, dst_slots % bs] = cache[src_slots // bs, src_slots % bs]
