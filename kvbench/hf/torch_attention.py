"""Paged attention in plain torch, vectorised per step: the CPU fast path of ``engine.attention=torch``.

Same semantics as ``kernels.paged_attention_ref`` (causal attention of each sequence's new tokens
over its K/V read through its block table), but the index work is done once per step
(``TorchAttentionPlan``) and shared by every layer, and each layer runs a handful of large ops
instead of a Python loop of small ones:

- decode sequences (one new token) all together: one gather of their K/V through the slot index
  [num_decode, max_context] into a head-major [Hkv, num_decode, max_context, D] tensor, one
  batched matmul for the scores with the key-padding mask added in the same call (``baddbmm``;
  the query heads of a KV head are the rows of one matrix, so GQA reads each K/V once), softmax,
  one batched matmul with V;
- prefill chunks (several new tokens) one by one with ``scaled_dot_product_attention``: a chunk
  that starts at position 0 attends to its own new K/V (the values just stored, no gather); a
  chunk after a cached prefix (chunked prefill, prefix-cache hit) gathers its context and uses a
  causal mask offset by the prefix.

The gather through the block table is the paged cost the harness measures; it is counted in
``attention_s``. Off float32, scores and softmax run in float32 (inputs are upcast).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(slots=True)
class _Prefill:
    start: int  # first row of the chunk in the packed batch
    stop: int
    slots: torch.Tensor | None  # [context] int64 pool slots; None: the chunk is the whole context
    mask: torch.Tensor | None  # [q_len, context] bool (True = attend); None: plain causal


class TorchAttentionPlan:
    """The per-step indices of the batched torch path, built on the host from the step's chunks:
    ``starts`` [B + 1] query offsets, ``context`` [B] context lengths (new tokens included),
    ``tables`` [B, >= max blocks] block tables."""

    def __init__(self, *, starts: np.ndarray, context: np.ndarray, tables: np.ndarray, block_size: int,
                 num_kv_heads: int, device: torch.device) -> None:
        q_lens = np.diff(starts)
        decode = np.flatnonzero(q_lens == 1)
        self.num_decode = len(decode)
        self.all_decode = len(decode) == len(q_lens)
        if len(decode):
            ctx = context[decode]
            width = int(ctx.max())
            positions = np.arange(width)
            blocks = tables[decode][:, positions // block_size]
            slots = blocks.astype(np.int64) * block_size + positions % block_size  # [n, width]
            pad = positions[None, :] >= ctx[:, None]
            slots[pad] = 0  # any real slot: masked out by the bias
            bias = np.where(pad, -np.inf, 0.0).astype(np.float32)  # [n, width]
            self.decode_rows = torch.from_numpy(starts[decode].astype(np.int64)).to(device)
            self.decode_slots = torch.from_numpy(np.ascontiguousarray(slots)).to(device)
            # [Hkv * n, 1, width]: one row per (KV head, sequence), broadcast over its query heads
            self.decode_bias = torch.from_numpy(np.tile(bias, (num_kv_heads, 1))[:, None, :]).to(device)
        self.prefills: list[_Prefill] = []
        for b in np.flatnonzero(q_lens > 1):
            ctx, q_len = int(context[b]), int(q_lens[b])
            slots = mask = None
            if ctx != q_len:
                positions = np.arange(ctx)
                slots = torch.from_numpy(tables[b, positions // block_size].astype(np.int64) * block_size
                                         + positions % block_size).to(device)
                mask = torch.from_numpy(positions[None, :] <= np.arange(ctx - q_len, ctx)[:, None]).to(device)
            self.prefills.append(_Prefill(int(starts[b]), int(starts[b + 1]), slots, mask))


def store_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             slots: torch.Tensor) -> None:
    """key/value [T, Hkv, D] into the pool at ``slots`` [T] (all valid)."""
    num_blocks, block_size, heads, dim = key_cache.shape
    key_cache.view(num_blocks * block_size, heads, dim).index_copy_(0, slots, key)
    value_cache.view(num_blocks * block_size, heads, dim).index_copy_(0, slots, value)


def _gather(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The K (or V) of ``slots`` [N] from a [num_blocks, block_size, Hkv, D] pool, head-major and
    contiguous: [Hkv, N, D]."""
    num_blocks, block_size, heads, dim = cache.shape
    return torch.index_select(cache.view(num_blocks * block_size, heads, dim).transpose(0, 1), 1, slots)


def attention(plan: TorchAttentionPlan, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              key_cache: torch.Tensor, value_cache: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """query [Hq, T, D], key/value [Hkv, T, D] (this step's tokens, already stored in the pool) ->
    out [T, Hq, D]."""
    num_blocks, block_size, kv_heads, dim = key_cache.shape
    num_heads, num_tokens = query.shape[0], query.shape[1]
    group = num_heads // kv_heads
    upcast = query.dtype != torch.float32
    if plan.num_decode:
        n = plan.num_decode
        q = query if plan.all_decode else query.index_select(1, plan.decode_rows)  # [Hq, n, D]
        q = q.view(kv_heads, group, n, dim).transpose(1, 2)
        q_scaled = torch.empty((kv_heads, n, group, dim), dtype=torch.float32, device=q.device)
        torch.mul(q, scale, out=q_scaled)  # [Hkv, n, G, D]
        width = plan.decode_slots.shape[1]
        k = _gather(key_cache, plan.decode_slots.view(-1))  # [Hkv, n * W, D]
        v = _gather(value_cache, plan.decode_slots.view(-1))
        if upcast:
            k, v = k.float(), v.float()
        scores = torch.baddbmm(plan.decode_bias, q_scaled.view(kv_heads * n, group, dim),
                               k.view(kv_heads * n, width, dim).transpose(1, 2))  # [Hkv * n, G, W]
        probs = torch.softmax(scores, dim=-1)
        o = torch.bmm(probs, v.view(kv_heads * n, width, dim)).view(kv_heads, n, group, dim).transpose(0, 1)
        if plan.all_decode:
            out.view(n, kv_heads, group, dim).copy_(o)
        else:
            out.view(num_tokens, kv_heads, group, dim).index_copy_(0, plan.decode_rows, o.to(out.dtype))
    for p in plan.prefills:
        q = query[:, p.start:p.stop].unsqueeze(0)  # [1, Hq, q, D]
        if p.slots is None:
            k = key[:, p.start:p.stop].unsqueeze(0)  # [1, Hkv, q, D]
            v = value[:, p.start:p.stop].unsqueeze(0)
        else:
            k = _gather(key_cache, p.slots).unsqueeze(0)  # [1, Hkv, context, D]
            v = _gather(value_cache, p.slots).unsqueeze(0)
        if upcast:
            q, k, v = q.float(), k.float(), v.float()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=p.mask, is_causal=p.mask is None, scale=scale,
                                           enable_gqa=group > 1)  # [1, Hq, q, D]
        out[p.start:p.stop] = o[0].transpose(0, 1)
    return out
