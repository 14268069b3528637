"""Paged attention in plain torch, vectorised per step: the CPU fast path of ``engine.attention=torch``.

Same semantics as ``kernels.paged_attention_ref`` (causal attention of each sequence's new tokens
over its K/V read through its block table), but the index work is done once per step
(``TorchAttentionPlan``) and shared by every layer, and each layer runs a few batched ops instead
of a Python loop over sequences:

- decode sequences (one new token) together: one gather of their K/V through the slot index
  [num_decode, max_context], one batched matmul for the scores (query heads grouped by KV head,
  so GQA reads each K/V once), a key-padding mask, softmax, one batched matmul with V;
- prefill chunks (several new tokens) one by one: a gather of the chunk's context and
  ``scaled_dot_product_attention`` with a causal mask offset by the cached prefix.

The gather through the block table is the paged cost the harness measures; it is counted in
``attention_s``. Scores and softmax run in float32 (inputs of other dtypes are upcast).
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
    slots: torch.Tensor  # [context] int64: the pool slot of every position of the sequence
    mask: torch.Tensor | None  # [q_len, context] bool, None when the chunk starts at position 0 (plain causal)


class TorchAttentionPlan:
    """The per-step indices of the batched torch path, built on the host from the step's chunks."""

    def __init__(self, *, starts: np.ndarray, context: np.ndarray, tables: np.ndarray, block_size: int,
                 device: torch.device) -> None:
        q_lens = np.diff(starts)
        decode = np.flatnonzero(q_lens == 1)
        self.decode_rows: torch.Tensor | None = None
        if len(decode):
            ctx = context[decode]
            width = int(ctx.max())
            positions = np.arange(width)
            blocks = tables[decode][:, np.minimum(positions // block_size, tables.shape[1] - 1)]
            slots = blocks.astype(np.int64) * block_size + positions % block_size  # [num_decode, width]
            valid = positions[None, :] < ctx[:, None]
            slots[~valid] = 0  # any real slot; masked out below
            self.decode_rows = torch.from_numpy(starts[decode].astype(np.int64)).to(device)
            self.decode_slots = torch.from_numpy(slots).to(device)
            self.decode_pad = torch.from_numpy(~valid).to(device)[:, None, None, :]  # [n, 1, 1, width]
            self.all_decode = len(decode) == len(q_lens)
        self.prefills: list[_Prefill] = []
        for b in np.flatnonzero(q_lens > 1):
            ctx, q_len = int(context[b]), int(q_lens[b])
            positions = np.arange(ctx)
            slots = tables[b, positions // block_size].astype(np.int64) * block_size + positions % block_size
            mask = None
            if ctx != q_len:
                q_pos = np.arange(ctx - q_len, ctx)
                mask = torch.from_numpy(positions[None, :] <= q_pos[:, None]).to(device)
            self.prefills.append(_Prefill(int(starts[b]), int(starts[b + 1]), torch.from_numpy(slots).to(device), mask))


def store_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             slots: torch.Tensor) -> None:
    """key/value [T, Hkv, D] into the pool at ``slots`` [T] (all valid)."""
    num_blocks, block_size, heads, dim = key_cache.shape
    key_cache.view(num_blocks * block_size, heads, dim).index_copy_(0, slots, key)
    value_cache.view(num_blocks * block_size, heads, dim).index_copy_(0, slots, value)


def attention(plan: TorchAttentionPlan, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
              scale: float, out: torch.Tensor) -> torch.Tensor:
    """query [T, Hq, D] -> out [T, Hq, D]; the step's new K/V must already be in the pool."""
    num_blocks, block_size, kv_heads, dim = key_cache.shape
    keys = key_cache.view(num_blocks * block_size, kv_heads, dim)
    values = value_cache.view(num_blocks * block_size, kv_heads, dim)
    num_heads = query.shape[1]
    group = num_heads // kv_heads
    if plan.decode_rows is not None:
        n = plan.decode_rows.shape[0]
        q = query if plan.all_decode else query.index_select(0, plan.decode_rows)
        q = q.reshape(n, kv_heads, group, dim).float()  # [n, Hkv, G, D]
        k = keys[plan.decode_slots].float()  # [n, W, Hkv, D]
        v = values[plan.decode_slots].float()
        scores = torch.matmul(q, k.permute(0, 2, 3, 1))  # [n, Hkv, G, W]
        scores.mul_(scale).masked_fill_(plan.decode_pad, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.matmul(probs, v.transpose(1, 2))  # [n, Hkv, G, D]
        o = o.reshape(n, num_heads, dim).to(out.dtype)
        if plan.all_decode:
            out.copy_(o)
        else:
            out.index_copy_(0, plan.decode_rows, o)
    for p in plan.prefills:
        q = query[p.start:p.stop].transpose(0, 1).unsqueeze(0)  # [1, Hq, q, D]
        k = keys[p.slots].transpose(0, 1).unsqueeze(0)  # [1, Hkv, ctx, D]
        v = values[p.slots].transpose(0, 1).unsqueeze(0)
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        dtype = q.dtype
        if dtype != torch.float32 and q.device.type == "cpu":
            q, k, v = q.float(), k.float(), v.float()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=p.mask, is_causal=p.mask is None, scale=scale)
        out[p.start:p.stop] = o[0].transpose(0, 1).to(out.dtype)
    return out
