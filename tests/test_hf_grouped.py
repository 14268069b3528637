"""A mixed full / sliding-window model (Gemma 3) on the hf backend with the grouped allocators equals
transformers' greedy ``generate``.

Tiny ``gemma3_text`` (4 layers: three slide over 5 tokens, one attends to everything), eight concurrent
prompts of different lengths (up to 40 tokens, 8x the window), a token budget of 16 that chunks the
long prompts, and a pool small enough to preempt. With ``hybrid``, ``hybrid_static`` and ``lcm`` each
layer group keeps its own block table: the window group drops the blocks that left the window (so
its tables hold dropped entries that the attention must skip), and each layer reads its group's
table and slots. ``uniform`` pages every layer as full attention (one table).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from allocators import build
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.executors.hf import HFExecutor
from kvbench.hf.model import build_model
from kvbench.layer_groups import layer_groups
from kvbench.requests import Request
from tests.engine_helpers import make_requests
from tests.test_hf_executor import hf_generate
from tests.test_hf_families import MAX_MODEL_LEN, SPECS, family_cfg
from tests.hf_helpers import interpreted, one_thread  # noqa: F401 (one_thread: autouse, one torch thread)

WINDOW = 5
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
BUDGET = 16
REQUESTS = SPECS + [(9, 22), (17, 16)]  # (prompt, output)


@pytest.fixture(scope="module")
def gemma3():
    cfg = family_cfg("gemma3_text", num_layers=4, sliding_window=WINDOW, layer_types=LAYER_TYPES)
    reference = build_model(cfg, seed=0, attn_implementation="sdpa")
    return cfg, reference, build_model(cfg, seed=0)


def grouped_allocator(cfg, name: str, num_slots: int, **knobs):
    geometry = model_geometry(cfg)
    assert {g.kind for g in geometry.groups} == {"full", "window"}
    groups = [list(g.spec()) for g in layer_groups(cfg)]
    if name == "hybrid_static":
        knobs.setdefault("max_model_len", MAX_MODEL_LEN)
    return build(name, num_slots, block_size=4, groups=groups, slot_bytes=geometry.bytes_per_slot,
                 prefill_chunk=BUDGET, debug=True, **knobs)


def run_engine(cfg, model, requests, alloc, attention: str = "torch", torch_path: str = "batched"):
    layout = alloc.attention_layout() if alloc.per_group_tables else None
    executor = HFExecutor(cfg, OmegaConf.create({"attention": attention, "max_num_batched_tokens": BUDGET}),
                          num_slots=alloc.num_slots, block_size=alloc.block_size, device="cpu", model=model,
                          geometry=model_geometry(cfg), kv_layout=layout,
                          backend_cfg=OmegaConf.create({"torch_attention": torch_path}))
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=BUDGET),
                    max_steps=3000)
    out = engine.run(requests)
    return out, {rid: samples[0] for rid, samples in out.outputs.items()}


# (allocator, pool slots, knobs): each pool is small enough that the eight requests preempt
CASES = [("uniform", 64, {}), ("hybrid", 40, {}), ("hybrid_static", 48, {"split_len": 40}), ("lcm", 40, {})]


@pytest.mark.parametrize("allocator,num_slots,knobs", CASES, ids=[a for a, _, _ in CASES])
def test_gemma3_on_grouped_allocators_equals_generate(gemma3, allocator, num_slots, knobs):
    cfg, reference, model = gemma3
    requests = make_requests(REQUESTS, vocab_size=256, seed=1)
    expected = {r.request_id: hf_generate(reference, r) for r in requests}
    alloc = grouped_allocator(cfg, allocator, num_slots, **knobs)
    assert alloc.per_group_tables == (allocator != "uniform")
    out, got = run_engine(cfg, model, requests, alloc)
    assert out.summary["num_finished"] == len(REQUESTS)
    assert out.summary["num_preemptions"] > 0
    assert got == expected
    if allocator != "uniform":
        assert alloc.stats()["window_freed_blocks"] > 0  # the window group dropped blocks the attention skipped


def test_the_kernels_torch_reference_reads_each_groups_table(gemma3):
    """backend.torch_attention=reference: the kernels' signature (block tables, no step plan)."""
    cfg, reference, model = gemma3
    requests = make_requests(REQUESTS[:4], vocab_size=256, seed=2)
    expected = {r.request_id: hf_generate(reference, r) for r in requests}
    alloc = grouped_allocator(cfg, "lcm", 40)
    _, got = run_engine(cfg, model, requests, alloc, torch_path="reference")
    assert alloc.stats()["window_freed_blocks"] > 0
    assert got == expected


@pytest.mark.parametrize("allocator,ratio", [("hybrid", 4.0), ("lcm", 2.0), ("hybrid_static", 1.0)])
def test_each_group_tensor_has_a_block_for_every_id_it_may_name(gemma3, allocator, ratio, caplog):
    """hybrid: 40 slots of 4 layers = 40 pages of 4 one-layer tokens; the full group's tensor (1 layer)
    and the window group's (3 layers) each have 40 blocks: 4x the books. lcm: each group's ids cover
    the pool once (2x); hybrid_static: each group its share (1x)."""
    cfg, _, model = gemma3
    alloc = grouped_allocator(cfg, allocator, 40, **({"split_len": 40} if allocator == "hybrid_static" else {}))
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=40, block_size=4, device="cpu",
                          model=model, geometry=model_geometry(cfg), kv_layout=alloc.attention_layout())
    books = 40 * model_geometry(cfg).pool_bytes_per_slot
    assert executor.grouped.nbytes == pytest.approx(ratio * books, rel=0.1)
    assert [len(p.key_caches) for p in executor.grouped.pools] == [1, 3]
    assert ("KV tensors take" in caplog.text) == (executor.grouped.nbytes > books)


@pytest.mark.parametrize("allocator", ["hybrid_prefix", "lcm_prefix"])
def test_gemma3_prefix_hits_equal_generate(gemma3, allocator):
    """Two requests share a 24-token prefix (6 blocks, past the window); the later one hits it in
    every group (the full group's blocks, the window group's last blocks, its earlier ones dropped)."""
    cfg, reference, model = gemma3
    shared = make_requests([(24, 1)], vocab_size=256, seed=5)[0].prompt_ids
    tails = make_requests([(7, 1), (13, 1)], vocab_size=256, seed=6)
    requests = [Request(0, shared + tails[0].prompt_ids, 9, 0.0, 1, 1),
                Request(1, shared + tails[1].prompt_ids, 12, 5.0, 1, 1)]
    expected = {r.request_id: hf_generate(reference, r) for r in requests}
    alloc = grouped_allocator(cfg, allocator, 96)
    out, got = run_engine(cfg, model, requests, alloc)
    assert out.summary["prefix_hit_rate"] > 0
    assert got == expected


def test_a_model_without_its_window_decodes_differently(gemma3):
    """The same weights with full attention everywhere give other tokens: the equality above would
    catch a window group read as if it held every token (or a dropped block read as a real one)."""
    cfg, reference, _ = gemma3
    requests = make_requests(SPECS, vocab_size=256, seed=1)
    plain = build_model(family_cfg("gemma3_text", num_layers=4, sliding_window=MAX_MODEL_LEN,
                                   layer_types=LAYER_TYPES), seed=0, attn_implementation="sdpa")
    assert {r.request_id: hf_generate(plain, r) for r in requests} != \
        {r.request_id: hf_generate(reference, r) for r in requests}


@pytest.mark.slow
def test_triton_interpreter_path_reads_each_groups_table(tmp_path):
    """engine.attention=triton under TRITON_INTERPRET=1 (a subprocess: set before triton is imported),
    hybrid: the kernels read each layer group's table, its dropped entries as block 0 under the window."""
    root = Path(__file__).resolve().parent.parent
    script = tmp_path / "triton_grouped.py"
    script.write_text(
        "import json\n"
        "from tests.test_hf_grouped import *\n"
        "cfg = family_cfg('gemma3_text', num_layers=4, sliding_window=WINDOW, layer_types=LAYER_TYPES)\n"
        "requests = make_requests([(5, 12), (14, 8), (21, 4)], vocab_size=256, seed=10)\n"
        "alloc = grouped_allocator(cfg, 'hybrid', 40)\n"
        "_, got = run_engine(cfg, build_model(cfg, seed=0), requests, alloc, attention='triton')\n"
        "ref = build_model(cfg, seed=0, attn_implementation='sdpa')\n"
        "print(json.dumps([got, {r.request_id: hf_generate(ref, r) for r in requests},\n"
        "                  alloc.stats()['window_freed_blocks']]))\n")
    got, expected, freed = interpreted(script, timeout=900)
    assert freed > 0
    assert got == expected
