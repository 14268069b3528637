"""Paged attention in plain torch, vectorised per step: the CPU fast path of ``engine.attention=torch``.

Same semantics as ``kernels.paged_attention_ref`` (causal attention of each sequence's new tokens
over its K/V read through its block table), but the index work is done once per step
(``TorchAttentionPlan``) and shared by every layer, and each layer runs a handful of large ops
instead of a Python loop of small ones:

- decode sequences (one new token) together, in a few buckets of similar context length (so the
  padding to a bucket's longest context stays small): per bucket, one gather of their K/V into a
  contiguous head-major [Hkv, n, width, D] tensor (the pool viewed as rows of D values, row =
  slot * Hkv + head), one batched matmul for the scores with the key-padding mask added in the
  same call (``baddbmm``; the query heads of a KV head are the rows of one matrix, so GQA reads
  each K/V once), softmax, one batched matmul with V;
- prefill chunks (several new tokens) one by one with ``scaled_dot_product_attention``: a chunk
  that starts at position 0 attends to its own new K/V (the values just stored, no gather); a
  chunk after a cached prefix (chunked prefill, prefix-cache hit) gathers its context and uses a
  causal mask offset by the prefix.

Per-layer features (``attention(..., window=, softcap=)``): a sliding window masks keys more than
``window - 1`` positions behind the query (the masks are built once per step and window, shared by
the layers with that window); soft-capping replaces the scores by ``softcap * tanh(scores /
softcap)`` before the mask, so its prefill chunks use an explicit softmax instead of SDPA.

The gather through the block table is the paged cost the harness measures; it is counted in
``attention_s``. Off float32, scores and softmax run in float32 (inputs are upcast).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

MAX_PADDING = 1.25  # decode sequences share a gather when the longest context is within this of the shortest
MAX_BUCKETS = 8


@dataclass(slots=True)
class _DecodeBucket:
    """Decode sequences of similar context length, attended together."""

    rows: torch.Tensor  # [n] int64: their rows in the packed batch
    index: torch.Tensor  # [Hkv * n * width] int64 gather index of their K/V (see _head_major_index)
    bias: torch.Tensor  # [Hkv * n, 1, width] float32: 0, or -inf past a sequence's context
    width: int  # the longest context of the bucket
    context: np.ndarray  # [n] context lengths of its sequences
    window_bias: dict[int, torch.Tensor] = field(default_factory=dict)  # window -> bias with it applied

    def bias_for(self, window: int | None) -> torch.Tensor:
        """The key mask of this bucket, narrowed to the last ``window`` positions when set."""
        if window is None or window >= self.width:
            return self.bias
        if window not in self.window_bias:
            positions = np.arange(self.width)
            ctx = self.context[:, None]
            drop = (positions[None, :] >= ctx) | (positions[None, :] < ctx - window)  # [n, width]
            bias = np.where(drop, -np.inf, 0.0).astype(np.float32)
            heads = self.bias.shape[0] // len(self.context)
            self.window_bias[window] = torch.from_numpy(np.tile(bias, (heads, 1))[:, None, :]).to(self.bias.device)
        return self.window_bias[window]


def _length_buckets(ctx: np.ndarray) -> list[np.ndarray]:
    """Indices of ``ctx`` grouped by length (ascending), each group's longest within a padding ratio
    of its shortest; the ratio grows if needed to keep at most MAX_BUCKETS groups."""
    order = np.argsort(ctx, kind="stable")
    ratio = max(MAX_PADDING, float(ctx.max() / ctx.min()) ** (1 / MAX_BUCKETS) + 1e-9)
    groups, first = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or ctx[order[i]] > ratio * ctx[order[first]]:
            groups.append(order[first:i])
            first = i
    return groups


def _decode_bucket(members: np.ndarray, starts: np.ndarray, context: np.ndarray, tables: np.ndarray,
                   block_size: int, num_kv_heads: int, device: torch.device) -> _DecodeBucket:
    ctx = context[members]
    width = int(ctx.max())
    positions = np.arange(width)
    slots = tables[members][:, positions // block_size].astype(np.int64) * block_size + positions % block_size
    pad = positions[None, :] >= ctx[:, None]  # [n, width]
    slots[pad] = 0  # any real slot: masked out by the bias
    bias = np.where(pad, -np.inf, 0.0).astype(np.float32)
    return _DecodeBucket(
        rows=torch.from_numpy(starts[members].astype(np.int64)).to(device),
        index=_head_major_index(slots, num_kv_heads, device),
        # one row per (KV head, sequence), broadcast over its query heads
        bias=torch.from_numpy(np.tile(bias, (num_kv_heads, 1))[:, None, :]).to(device),
        width=width, context=ctx)


@dataclass(slots=True)
class _Prefill:
    start: int  # first row of the chunk in the packed batch
    stop: int
    slots: torch.Tensor | None  # [Hkv * context] gather index (see _head_major_index); None: no prefix
    mask: torch.Tensor | None  # [q_len, context] bool (True = attend); None: plain causal
    context: int = 0
    window_mask: dict[int | None, torch.Tensor] = field(default_factory=dict)

    def mask_for(self, window: int | None) -> torch.Tensor:
        """The explicit [q_len, context] mask (True = attend), narrowed to ``window`` when set."""
        if window not in self.window_mask:
            q_pos = np.arange(self.context - (self.stop - self.start), self.context)[:, None]
            positions = np.arange(self.context)[None, :]
            keep = positions <= q_pos
            if window is not None:
                keep &= positions > q_pos - window
            device = self.mask.device if self.mask is not None else (self.slots.device if self.slots is not None
                                                                     else torch.device("cpu"))
            self.window_mask[window] = torch.from_numpy(keep).to(device)
        return self.window_mask[window]


class TorchAttentionPlan:
    """The per-step indices of the batched torch path, built on the host from the step's chunks:
    ``starts`` [B + 1] query offsets, ``context`` [B] context lengths (new tokens included),
    ``tables`` [B, >= max blocks] block tables."""

    def __init__(self, *, starts: np.ndarray, context: np.ndarray, tables: np.ndarray, block_size: int,
                 num_kv_heads: int, device: torch.device) -> None:
        q_lens = np.diff(starts)
        decode = np.flatnonzero(q_lens == 1)
        self.decode: list[_DecodeBucket] = []
        self.all_decode = len(decode) == len(q_lens)  # then a single bucket covers rows 0..T-1 in order
        if len(decode):
            ctx = context[decode]
            if self.all_decode and ctx.max() <= MAX_PADDING * ctx.min():
                groups = [np.arange(len(decode))]
            else:
                self.all_decode = False
                groups = _length_buckets(ctx)
            for members in groups:
                self.decode.append(_decode_bucket(decode[members], starts, context, tables, block_size,
                                                  num_kv_heads, device))
        self.prefills: list[_Prefill] = []
        for b in np.flatnonzero(q_lens > 1):
            ctx, q_len = int(context[b]), int(q_lens[b])
            slots = mask = None
            if ctx != q_len:
                positions = np.arange(ctx)
                slots = _head_major_index(tables[b, positions // block_size].astype(np.int64) * block_size
                                          + positions % block_size, num_kv_heads, device)
                mask = torch.from_numpy(positions[None, :] <= np.arange(ctx - q_len, ctx)[:, None]).to(device)
            self.prefills.append(_Prefill(int(starts[b]), int(starts[b + 1]), slots, mask, ctx))


def store_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             slots: torch.Tensor) -> None:
    """key [T, Hkv, D], value [T, Hkv, Dv] into the pool at ``slots`` [T] (all valid)."""
    num_blocks, block_size, heads, dim = key_cache.shape
    key_cache.view(num_blocks * block_size, heads, dim).index_copy_(0, slots, key)
    value_cache.view(num_blocks * block_size, heads, value_cache.shape[-1]).index_copy_(0, slots, value)


def _head_major_index(slots: np.ndarray, num_kv_heads: int, device: torch.device) -> torch.Tensor:
    """Rows of the pool viewed as [num_slots * Hkv, D] for slots [...]: flat [Hkv * slots.size], head
    first, so that one gather yields contiguous head-major K (or V) [Hkv, ..., D]."""
    rows = slots.astype(np.int64)[None] * num_kv_heads + np.arange(num_kv_heads).reshape((-1,) + (1,) * slots.ndim)
    return torch.from_numpy(np.ascontiguousarray(rows).reshape(-1)).to(device)


def _gather(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[len(index), D] rows of a [num_blocks, block_size, Hkv, D] pool (a _head_major_index)."""
    return torch.index_select(cache.view(-1, cache.shape[-1]), 0, index)


def attention(plan: TorchAttentionPlan, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              key_cache: torch.Tensor, value_cache: torch.Tensor, scale: float, out: torch.Tensor, *,
              window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """query [Hq, T, D], key [Hkv, T, D], value [Hkv, T, Dv] (this step's tokens, already stored in the
    pool) -> out [T, Hq, Dv]. window / softcap as ``kernels.paged_attention_ref``."""
    num_blocks, block_size, kv_heads, dim = key_cache.shape
    v_dim = value_cache.shape[-1]
    num_heads, num_tokens = query.shape[0], query.shape[1]
    group = num_heads // kv_heads
    upcast = query.dtype != torch.float32
    for bucket in plan.decode:
        n, width = bucket.rows.shape[0], bucket.width
        q = query if plan.all_decode else query.index_select(1, bucket.rows)  # [Hq, n, D]
        q_scaled = torch.empty((kv_heads, n, group, dim), dtype=torch.float32, device=q.device)
        torch.mul(q.view(kv_heads, group, n, dim).transpose(1, 2), scale, out=q_scaled)  # [Hkv, n, G, D]
        k = _gather(key_cache, bucket.index).view(kv_heads * n, width, dim)  # [Hkv * n, W, D]
        v = _gather(value_cache, bucket.index).view(kv_heads * n, width, v_dim)
        if upcast:
            k, v = k.float(), v.float()
        bias = bucket.bias_for(window)
        if softcap is None:
            scores = torch.baddbmm(bias, q_scaled.view(kv_heads * n, group, dim), k.transpose(1, 2))
        else:
            scores = torch.bmm(q_scaled.view(kv_heads * n, group, dim), k.transpose(1, 2))
            scores = torch.tanh(scores.div_(softcap)).mul_(softcap).add_(bias)
        probs = torch.softmax(scores, dim=-1)  # [Hkv * n, G, W]
        o = torch.bmm(probs, v).view(kv_heads, n, group, v_dim).transpose(0, 1)  # [n, Hkv, G, Dv]
        if plan.all_decode:
            out.view(n, kv_heads, group, v_dim).copy_(o)
        else:
            out.view(num_tokens, kv_heads, group, v_dim).index_copy_(0, bucket.rows, o.to(out.dtype))
    for p in plan.prefills:
        q = query[:, p.start:p.stop].unsqueeze(0)  # [1, Hq, q, D]
        if p.slots is None:
            k = key[:, p.start:p.stop].unsqueeze(0)  # [1, Hkv, q, D]
            v = value[:, p.start:p.stop].unsqueeze(0)
        else:
            k = _gather(key_cache, p.slots).view(1, kv_heads, -1, dim)  # [1, Hkv, context, D]
            v = _gather(value_cache, p.slots).view(1, kv_heads, -1, v_dim)
        if upcast:
            q, k, v = q.float(), k.float(), v.float()
        if softcap is not None:
            o = _capped_attention(q[0], k[0], v[0], p.mask_for(window), scale, softcap)
        else:
            mask = p.mask if window is None else p.mask_for(window)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale,
                                               enable_gqa=group > 1)  # [1, Hq, q, D]
        out[p.start:p.stop] = o[0].transpose(0, 1)
    return out


def _capped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, scale: float,
                      softcap: float) -> torch.Tensor:
    """q [Hq, q, D], k/v [Hkv, context, D], keep [q, context] -> [1, Hq, q, D] with soft-capped scores."""
    group = q.shape[0] // k.shape[0]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale / softcap)  # [Hq, q, context]
    scores = torch.tanh(scores).mul_(softcap).masked_fill_(~keep, float("-inf"))
    return torch.bmm(torch.softmax(scores, dim=-1), v).unsqueeze(0)
