"""vAttention: pages sized by the model's per-tensor token bytes, mapped on demand, exact waste."""
from __future__ import annotations

import pytest

from allocators import AllocatorError, CopyOp, VAttentionAllocator
from kvbench.batch import StepBatch
from kvbench.config.spec import model_geometry
from kvbench.sim.cost_model import VMM_CALL_S, StepSummary


def va(**kw):
    knobs = dict(block_size=4, page_bytes=64, token_bytes=4, debug=True)  # 16 tokens per page
    knobs.update(kw)
    return VAttentionAllocator(kw.pop("num_slots", 64), **{k: v for k, v in knobs.items() if k != "num_slots"})


def test_tokens_per_page_follow_the_model_geometry():
    # Llama-3-8B: 8 KV heads x 128 x 2 bytes = 2 KiB per token per layer per tensor
    assert VAttentionAllocator(1 << 16, page_bytes=2 << 20, token_bytes=2048).tokens_per_page == 1024
    assert VAttentionAllocator(1 << 16, page_bytes=64 << 10, token_bytes=2048).tokens_per_page == 32
    with pytest.raises(AllocatorError, match="204.8 tokens"):  # OPT-13B: 40 heads x 128 x 2 bytes
        VAttentionAllocator(1 << 16, block_size=16, page_bytes=2 << 20, token_bytes=10240)
    opt = VAttentionAllocator(1 << 16, page_bytes=2 << 20, token_bytes=10240)  # auto block size
    assert (opt.tokens_per_page, opt.block_size) == (204, 4)


def test_pages_map_on_demand_and_the_last_page_is_internal_waste():
    a = va()
    assert a.admit(0, [1] * 5, 64, final_len=20).ok
    assert a.block_table(0) == [0, 1, 2, 3]  # one page = 4 consecutive blocks
    a.grow(0, 5)
    u = a.usage({0: 20})
    assert (u.token, u.reserved, u.internal, u.external) == (5, 11, 0, 48)
    assert a.grow(0, 12) == list(range(5, 16)) + [16]  # position 16 maps a second page
    assert a.take_page_ops() == (2, 0)
    u = a.usage({0: 20})
    assert (u.token, u.reserved, u.internal, u.external) == (17, 3, 12, 32)


def test_fork_copies_page_by_page_and_free_unmaps_or_pools():
    a = va()
    a.admit(0, [1] * 20, 64)
    a.grow(0, 20)
    assert a.fork(0, 1)
    assert a.take_copy_ops() == [CopyOp(0, 32, 16), CopyOp(16, 48, 4)]
    a.free(1)
    assert a.take_page_ops() == (4, 2)
    pooled = va(reclaim="pool")
    pooled.admit(0, [1] * 20, 64)
    pooled.free(0)
    pooled.take_page_ops()
    pooled.admit(1, [1] * 20, 64)
    assert pooled.take_page_ops() == (0, 0)  # the pooled pages come back without a map call
    assert pooled.block_table(1)[0] == 4  # most recently freed page first: page 1


def test_the_sim_charges_each_map_per_layer_and_tensor():
    from omegaconf import OmegaConf

    from kvbench.sim import cost_model

    batch = StepBatch(chunks=[], block_size=16, page_maps=3, page_unmaps=1)
    s = cost_model.summarize(batch)
    assert isinstance(s, StepSummary) and (s.page_maps, s.page_unmaps) == (3, 1)
    model = OmegaConf.load("conf/model/llama-3-8b.yaml")
    gpu = OmegaConf.load("conf/gpu/a100-80gb.yaml")
    p = cost_model.CostParams.from_configs(model, gpu, geometry=model_geometry(model))
    t = cost_model.step_time(p, s)
    assert t["overhead_s"] == pytest.approx(4 * 2 * model.num_layers * VMM_CALL_S)
