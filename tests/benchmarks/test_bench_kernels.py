"""pytest-benchmark suite for the KV-pool ops as the engine calls them on the CPU (torch backend),
plus the Triton kernels when CUDA is present. The GPU sweep with bandwidth ceilings is
``python -m kernels.bench``; this suite tracks regressions of the per-step host cost."""
from __future__ import annotations

import pytest
import torch

import kernels

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _mixed_step(device: str, block_size: int = 16):
    """One engine-like step: 2 prefill chunks of 64 tokens, 14 decodes, contexts up to 512."""
    gen = torch.Generator().manual_seed(0)
    q_lens = [64, 64] + [1] * 14
    lens = [64, 320] + [int(x) for x in torch.randint(1, 512, (14,), generator=gen)]
    blocks = [-(-n // block_size) for n in lens]
    num_blocks = sum(blocks)
    tables = torch.zeros(len(lens), max(blocks), dtype=torch.int32)
    order, start = torch.randperm(num_blocks, generator=gen), 0
    for b, n in enumerate(blocks):
        tables[b, :n] = order[start: start + n]
        start += n
    cache = torch.randn(2, num_blocks, block_size, 2, 64, generator=gen)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    query = torch.randn(int(qsl[-1]), 8, 64, generator=gen)
    args = (query, cache[0], cache[1], tables, torch.tensor(lens, dtype=torch.int32), qsl)
    return tuple(t.to(device) for t in args)


@pytest.mark.parametrize("device", DEVICES)
def test_bench_paged_attention(benchmark, device):
    backend = "torch" if device == "cpu" else "triton"
    attention = kernels.get_ops(backend).paged_attention
    batch = _mixed_step(device)
    out = torch.empty_like(batch[0])

    def step():
        attention(*batch, 0.125, out=out)
        if device == "cuda":
            torch.cuda.synchronize()

    benchmark.group = f"kv-pool ops ({device})"
    benchmark(step)
    assert torch.isfinite(out).all()


def test_bench_plan_copies(benchmark):
    # a step's worth of CoW copies and one region move
    ops = [(i * 32, 4096 + i * 32, 16) for i in range(64)] + [(8192, 8200, 256)]
    benchmark.group = "kv-pool ops (cpu)"
    calls = benchmark(kernels.plan_copies, ops)
    assert sum(len(s) for s, _ in calls) == 64 * 16 + 256
