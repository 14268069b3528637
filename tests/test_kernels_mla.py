"""K and V of different head sizes (MLA: DeepSeek-V2/V3, MiniCPM3 store K of qk_nope + qk_rope and V
of v_head_dim per head): the Triton kernels against the torch reference, and the reference against
a direct computation.

Without CUDA the kernels run in the Triton interpreter (TRITON_INTERPRET=1 set before the kernels
are first imported); sizes stay tiny. Tolerance float32 1e-4 abs / 1e-4 rel, as tests/test_kernels.py.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import kernels  # noqa: E402
from kernels import checks  # noqa: E402
from kernels.attention import _paged_attention  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def debug_checks():
    previous = checks.set_debug_checks(True)
    yield
    checks.set_debug_checks(previous)


def mla_batch(q_lens, context_lens, *, head_size=24, v_head_size=12, num_heads=4, num_kv_heads=4, block_size=4,
              seed=0):
    gen = torch.Generator().manual_seed(seed)
    blocks = [-(-c // block_size) for c in context_lens]
    num_blocks = sum(blocks) + 2
    key_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_size, generator=gen)
    value_cache = torch.randn(num_blocks, block_size, num_kv_heads, v_head_size, generator=gen)
    order = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(q_lens), max(blocks) + 1, dtype=torch.int32)
    taken = 0
    for b, n in enumerate(blocks):
        tables[b, :n] = order[taken:taken + n]
        taken += n
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    query = torch.randn(int(starts[-1]), num_heads, head_size, generator=gen)
    return tuple(t.to(DEVICE) for t in (query, key_cache, value_cache, tables,
                                        torch.tensor(context_lens, dtype=torch.int32), starts))


def direct(query, key_cache, value_cache, tables, context_lens, starts, scale):
    """Attention written out per sequence, no paging helpers: [T, Hq, Dv]."""
    bs, group = key_cache.shape[1], query.shape[1] // key_cache.shape[2]
    out = []
    for b, ctx in enumerate(context_lens.tolist()):
        q = query[starts[b]:starts[b + 1]]
        pos = torch.arange(ctx, device=query.device)
        k = key_cache[tables[b, pos // bs].long(), pos % bs].repeat_interleave(group, 1)
        v = value_cache[tables[b, pos // bs].long(), pos % bs].repeat_interleave(group, 1)
        q_pos = ctx - q.shape[0] + torch.arange(q.shape[0], device=query.device)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
    return torch.cat(out)


@pytest.mark.parametrize("num_kv_heads", [4, 2])
@pytest.mark.parametrize("q_lens,contexts", [([1, 1, 1], [5, 13, 2]), ([6, 1, 3], [6, 9, 11])],
                         ids=["decode", "mixed"])
def test_attention_with_a_narrower_value_head(q_lens, contexts, num_kv_heads):
    batch = mla_batch(q_lens, contexts, num_kv_heads=num_kv_heads)
    expected = direct(*batch, 0.3)
    reference = kernels.paged_attention_ref(*batch, 0.3)
    assert reference.shape == (sum(q_lens), 4, 12)
    torch.testing.assert_close(reference, expected, atol=1e-5, rtol=1e-5)
    out = torch.full((sum(q_lens), 4, 12), float("nan"), device=DEVICE)
    for splits in (1, 3):  # split-K merges partial outputs of the value head size
        got = _paged_attention(*batch, 0.3, out=out, num_splits=splits)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match=r"out shape \[5, 4, 24\] differs from \[5, 4, 12\]"):
        kernels.paged_attention_ref(*mla_batch([4, 1], [4, 3]), 0.3, out=torch.empty(5, 4, 24, device=DEVICE))


@pytest.mark.parametrize("v_head_size", [12, 40])  # V narrower and wider than K
def test_store_and_copy_with_different_head_sizes(v_head_size):
    gen = torch.Generator().manual_seed(3)
    ops = {"triton": (kernels.store_kv, kernels.copy_slots), "torch": (kernels.store_kv_ref, kernels.copy_slots_ref)}
    results = {}
    key = torch.randn(5, 2, 24, generator=gen).to(DEVICE)
    value = torch.randn(5, 2, v_head_size, generator=gen).to(DEVICE)
    slots = torch.tensor([7, 0, 13, -1, 4], device=DEVICE)
    for name, (store, copy) in ops.items():
        key_cache = torch.zeros(4, 4, 2, 24, device=DEVICE)
        value_cache = torch.zeros(4, 4, 2, v_head_size, device=DEVICE)
        store(key, value, key_cache, value_cache, slots)
        copy(key_cache, value_cache, torch.tensor([7, 13], device=DEVICE), torch.tensor([1, 15], device=DEVICE))
        results[name] = (key_cache, value_cache)
    key_cache, value_cache = results["torch"]
    assert torch.equal(value_cache.view(16, 2, v_head_size)[[7, 0, 13, 4, 1, 15]], value[[0, 1, 2, 4, 0, 2]])
    assert torch.equal(key_cache.view(16, 2, 24)[[7, 0, 13, 4, 1, 15]], key[[0, 1, 2, 4, 0, 2]])
    assert value_cache.view(16, 2, v_head_size)[[2, 3, 5]].abs().sum() == 0  # the skipped token wrote nothing
    for got, want in zip(results["triton"], results["torch"]):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match=f"value must be \\[num_tokens, 2, {v_head_size}\\]"):
        kernels.store_kv_ref(key, key, *results["torch"], slots)
