"""Every configured model family on the paged pool equals transformers' own greedy ``generate``.

One tiny dummy config per family (hidden 64, 2 layers, the family's own config class through
``model.family``), six concurrent prompts of different lengths, a pool small enough to preempt and
a token budget that chunks prefills, for paged, paged_prefix and one contiguous policy. Mistral,
Starcoder2, Phi-3, Qwen2 (one sliding layer), Gemma-2 (alternating windows, attention and final
soft-capping, query_pre_attn_scalar) and Gemma-3 (per-layer windows) use windows far shorter than
the sequences, so a window the hook ignored would change the tokens (checked below). Anything the
hook cannot honour is refused before any step.
"""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from allocators import build
from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.executors.hf import HFExecutor
from kvbench.hf.features import UnsupportedAttention, read_layer
from kvbench.hf.model import FAMILIES, build_model
from tests.engine_helpers import make_requests
from tests.test_hf_executor import hf_generate
from tests.hf_helpers import interpreted, one_thread  # noqa: F401 (one_thread: autouse, one torch thread)

MAX_MODEL_LEN = 256
SPECS = [(5, 9), (23, 14), (3, 20), (40, 6), (12, 17), (31, 11)]  # (prompt, output), up to 51 tokens
FEATURES = {  # family -> extra model-config keys
    "mistral": dict(sliding_window=6),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2": dict(sliding_window=7, layer_types=["full_attention", "sliding_attention"]),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    "phi3": dict(sliding_window=9),
    "gemma2": dict(sliding_window=6, layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=2.0,
                   final_logit_softcapping=3.0, query_pre_attn_scalar=24),
    "gemma3_text": dict(sliding_window=5, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=24),
    "starcoder2": dict(sliding_window=6),
    # MLA: K 16 + 8 (nope + rope), V 12, a latent of 16, Q through a rank of 24
    "deepseek_v3": dict(num_kv_heads=4, head_size=24, v_head_size=12, kv_lora_rank=16, qk_rope_head_dim=8,
                        q_lora_rank=24),
}
ALLOCATORS = [("paged", {"block_size": 4}), ("paged_prefix", {"block_size": 4}),
              ("contiguous", {"reserve": "double", "double_chunk": 4, "block_size": 4,
                              "max_model_len": MAX_MODEL_LEN})]


def family_cfg(family: str, **extra):
    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny-llama.yaml")
    cfg.family, cfg.name, cfg.init_std, cfg.num_params = family, f"tiny-{family}", 0.2, None
    if family in ("gpt2", "gpt_neox", "opt"):
        cfg.num_kv_heads = cfg.num_heads
    for key, value in {**FEATURES.get(family, {}), **extra}.items():
        cfg[key] = value
    return cfg


_cache: dict = {}


def family_case(family: str):
    """(config, engine model, requests, generate's tokens), built once per family."""
    if family not in _cache:
        cfg = family_cfg(family)
        requests = make_requests(SPECS, vocab_size=256, seed=1)
        reference = build_model(cfg, seed=0, attn_implementation="sdpa")
        expected = {r.request_id: hf_generate(reference, r) for r in requests}
        _cache[family] = (cfg, build_model(cfg, seed=0), requests, expected)
    return _cache[family]


def run_engine(cfg, model, requests, allocator: str, knobs: dict, num_slots: int = 64, attention: str = "torch"):
    alloc = build(allocator, num_slots, debug=True, **knobs)
    executor = HFExecutor(cfg, OmegaConf.create({"attention": attention}), num_slots=num_slots,
                          block_size=alloc.block_size, device="cpu", model=model, geometry=model_geometry(cfg))
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=16),
                    max_steps=3000)
    out = engine.run(requests)
    return out, {rid: samples[0] for rid, samples in out.outputs.items()}


@pytest.mark.parametrize("allocator,knobs", ALLOCATORS, ids=[a for a, _ in ALLOCATORS])
@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_generate(family, allocator, knobs):
    cfg, model, requests, expected = family_case(family)
    num_slots = 96 if allocator == "contiguous" else 64  # double grows a 44-token region to 88 slots
    out, got = run_engine(cfg, model, requests, allocator, knobs, num_slots=num_slots)
    assert out.summary["num_finished"] == len(SPECS)
    assert out.summary["num_preemptions"] > 0
    assert (out.steps["num_tokens"] <= 16).all()
    assert got == expected


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3_text", "qwen2"])
def test_windows_and_softcaps_change_the_tokens(family):
    """Without its window (and soft-caps) the same weights decode differently: the equality above
    would catch an ignored feature."""
    _, _, requests, expected = family_case(family)
    # a window as long as max_model_len is full attention (Gemma's configs always want one)
    plain = family_cfg(family, sliding_window=MAX_MODEL_LEN, attn_logit_softcapping=None,
                       final_logit_softcapping=None)
    model = build_model(plain, seed=0, attn_implementation="sdpa")
    assert {r.request_id: hf_generate(model, r) for r in requests} != expected


def test_the_executor_reports_each_layers_features():
    cfg, model, _, _ = family_case("gemma2")
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=64, block_size=4, device="cpu",
                          model=model, geometry=model_geometry(cfg))
    assert [(layer.window, layer.softcap) for layer in executor.layers] == [(6, 2.0), (None, 2.0)]
    assert executor.layers[0].scale == pytest.approx(24 ** -0.5)
    from kvbench.geometry import KVGeometry

    assert KVGeometry.from_model_cfg(cfg).windows == (6, None)


# -- refused before any step ----------------------------------------------------------------------
def test_windows_that_differ_from_the_config_are_refused():
    """A model passed in whose layers slide while the config says full attention."""
    cfg, model, _, _ = family_case("mistral")
    with pytest.raises(ConfigError, match="sliding windows differ.*layer 0: model 6, config None"):
        HFExecutor(family_cfg("mistral", sliding_window=None), OmegaConf.create({"attention": "torch"}),
                   num_slots=64, block_size=4, device="cpu", model=model,
                   geometry=model_geometry(family_cfg("mistral", sliding_window=None)))


def test_unknown_family_and_misplaced_window_are_config_errors():
    with pytest.raises(ConfigError, match="model.family must be one of"):
        build_model(family_cfg("bloom"))
    with pytest.raises(ConfigError, match="llama has no sliding-window attention"):
        build_model(family_cfg("llama", sliding_window=8))
    with pytest.raises(ConfigError, match="mistral slides every layer or none"):
        build_model(family_cfg("mistral", layer_types=["full_attention", "sliding_attention"]))


def test_alibi_models_are_refused_before_any_step():
    from transformers import AutoConfig, AutoModelForCausalLM

    bloom = AutoModelForCausalLM.from_config(AutoConfig.for_model("bloom", vocab_size=256, hidden_size=64, n_layer=2,
                                                                  n_head=4))
    cfg = family_cfg("llama")
    cfg.num_kv_heads = 4
    with pytest.raises(UnsupportedAttention, match="ALiBi"):
        HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=64, block_size=4, device="cpu",
                   model=bloom, geometry=model_geometry(cfg))


class _Module:
    layer_idx = 0
    scaling = 0.5


@pytest.mark.parametrize("kwargs,dropout,match", [
    ({"s_aux": torch.zeros(4)}, 0.0, "s_aux"),  # attention sinks (gpt-oss)
    ({"is_causal": False}, 0.0, "non-causal"),
    ({}, 0.1, "dropout"),
    ({"sliding_window": 0}, 0.0, "sliding_window"),
])
def test_features_the_hook_cannot_honour_are_named(kwargs, dropout, match):
    with pytest.raises(UnsupportedAttention, match=match):
        read_layer(_Module(), torch.zeros(1, 4, 1, 8), None, dropout, kwargs)
    ok = read_layer(_Module(), torch.zeros(1, 4, 1, 8), None, 0.0, {"position_ids": torch.zeros(1), "use_cache": False})
    assert (ok.scale, ok.window, ok.softcap) == (0.5, None, None)


# -- the attention paths honour the features -----------------------------------------------------------
@pytest.mark.parametrize("window,softcap", [(3, None), (None, 1.5), (5, 2.0)])
@pytest.mark.parametrize("batch", ["mixed", "decode", "prefill"])
def test_batched_torch_attention_features_equal_the_reference(batch, window, softcap):
    """The CPU fast path (decode buckets, SDPA / explicit-softmax prefills) against kernels' reference."""
    import numpy as np

    from kernels import paged_attention_ref
    from kvbench.hf.torch_attention import TorchAttentionPlan, attention
    from tests.test_hf_executor import BATCHES

    gen = torch.Generator().manual_seed(7)
    block_size, heads, kv_heads, dim = 4, 4, 2, 8
    q_lens, contexts = (np.array(x) for x in BATCHES[batch])
    width = -(-contexts.max() // block_size)
    num_blocks = len(q_lens) * width + 3
    key_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    value_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    tables = torch.randperm(num_blocks, generator=gen).numpy()[: len(q_lens) * width]
    tables = tables.reshape(len(q_lens), width).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(q_lens)])
    query = torch.randn(int(starts[-1]), heads, dim, generator=gen)
    expected = paged_attention_ref(query, key_cache, value_cache, torch.from_numpy(tables),
                                   torch.from_numpy(contexts.astype(np.int32)),
                                   torch.from_numpy(starts.astype(np.int32)), 0.7, window=window, softcap=softcap)
    slots = np.concatenate([tables[b, pos // block_size] * block_size + pos % block_size
                            for b, pos in enumerate(np.arange(c - q, c) for q, c in zip(q_lens, contexts))])
    key = key_cache.view(-1, kv_heads, dim)[torch.from_numpy(slots)].transpose(0, 1)
    value = value_cache.view(-1, kv_heads, dim)[torch.from_numpy(slots)].transpose(0, 1)
    plan = TorchAttentionPlan(starts=starts, context=contexts, tables=tables, block_size=block_size,
                              num_kv_heads=kv_heads, device=torch.device("cpu"))
    for _ in range(2):  # the second call reuses the step's cached window masks
        got = attention(plan, query.transpose(0, 1), key, value, key_cache, value_cache, 0.7,
                        torch.empty_like(query), window=window, softcap=softcap)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_triton_interpreter_path_honours_windows_and_softcaps(tmp_path):
    """engine.attention=triton under TRITON_INTERPRET=1 (a subprocess: set before triton is imported)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = tmp_path / "triton_features.py"
    script.write_text(
        "import json\n"
        "from tests.test_hf_families import family_cfg, run_engine, build_model, make_requests, hf_generate\n"
        "result = {}\n"
        "for family in ('gemma2', 'mistral'):\n"
        "    cfg = family_cfg(family)\n"
        "    requests = make_requests([(5, 8), (14, 5)], vocab_size=256, seed=10)\n"
        "    _, got = run_engine(cfg, build_model(cfg, seed=0), requests, 'paged', {'block_size': 4}, attention='triton')\n"
        "    ref = build_model(cfg, seed=0, attn_implementation='sdpa')\n"
        "    result[family] = [got, {r.request_id: hf_generate(ref, r) for r in requests}]\n"
        "print(json.dumps(result))\n")
    for family, (got, expected) in interpreted(script).items():
        assert got == expected, family


@pytest.mark.parametrize("family", ["gemma2", "mistral", "qwen3_moe"])
def test_beams_match_generate(family):
    """k ranked beams equal generate(num_beams=k, num_return_sequences=k): Gemma-2's final soft-cap
    shapes the log-probabilities the beams are ranked by."""
    from tests.test_hf_executor import hf_beams

    cfg, model, _, _ = family_case(family)
    requests = make_requests([(6, 9, 0.0, 1, 3), (17, 7, 0.0, 1, 3)], vocab_size=256, seed=4)
    out, _ = run_engine(cfg, model, requests, "paged", {"block_size": 4}, num_slots=128)
    reference = build_model(cfg, seed=0, attn_implementation="sdpa")
    for r in requests:
        assert out.outputs[r.request_id] == hf_beams(reference, r, 3)


# -- reduced precision -----------------------------------------------------------------------------------
# Largest |engine logit - generate's model logit| over a row, relative to the row's largest |logit|,
# teacher-forced on generate's own tokens. Measured on these tiny models (2 layers, 6 requests, chunked
# prefill, preemption): bfloat16 up to 2.9e-2, float16 up to 3.9e-3, float32 up to 1.7e-6; transformers'
# own eager and SDPA attention differ by up to 4.3e-2 (bfloat16) and 3.8e-3 (float16) on the same models.
# Greedy tokens then agree exactly in float32 (above) and until the first near-tie in low precision.
LOGIT_TOLERANCE = {"bfloat16": 6e-2, "float16": 8e-3, "float32": 1e-5}


class _ForcedSampler:
    """Returns generate's token at each position and records the logits row it was given."""

    def __init__(self, forced: dict[int, list[int]], prompt_lens: dict[int, int]) -> None:
        self.forced, self.prompt_lens, self.rows = forced, prompt_lens, {}

    def __call__(self, logits, chunks):
        tokens = {}
        for row, chunk in zip(logits.float(), chunks):
            self.rows[(chunk.request_id, chunk.context_len)] = row.clone()
            tokens[chunk.seq_id] = self.forced[chunk.request_id][chunk.context_len - self.prompt_lens[chunk.request_id]]
        return tokens, {}, {}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("family,allocator", [("llama", "paged"), ("gemma2", "paged_prefix"), ("opt", "paged"),
                                              ("mistral", "paged")])
def test_low_precision_pools_and_models_match_generate_logits(family, allocator, dtype):
    cfg = family_cfg(family, dtype=dtype)
    requests = make_requests(SPECS, vocab_size=256, seed=1)
    reference = build_model(cfg, seed=0, attn_implementation="sdpa")
    forced = {r.request_id: hf_generate(reference, r) for r in requests}
    alloc = build(allocator, 64, block_size=4, debug=True)
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=64, block_size=4, device="cpu",
                          model=build_model(cfg, seed=0), geometry=model_geometry(cfg))
    assert executor.pool.data.dtype == getattr(torch, dtype)
    executor.sampler = _ForcedSampler(forced, {r.request_id: r.prompt_len for r in requests})
    out = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=16)).run(requests)
    assert out.summary["num_preemptions"] > 0
    assert len(executor.sampler.rows) == sum(r.output_len for r in requests)
    worst = 0.0
    for r in requests:
        with torch.inference_mode():
            logits = reference(torch.tensor([r.prompt_ids + forced[r.request_id]])).logits[0].float()
        for position in range(r.prompt_len, r.prompt_len + r.output_len):
            expected = logits[position - 1]
            got = executor.sampler.rows[(r.request_id, position)]
            worst = max(worst, float((got - expected).abs().max() / expected.abs().max()))
    assert worst <= LOGIT_TOLERANCE[dtype]
