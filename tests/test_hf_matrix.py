"""The family matrix (``kvbench.hf.matrix``): decoder types of the installed transformers, built tiny with
random weights (no download), each run exactly (token for token equal to transformers' ``generate`` of
each prompt alone) or refused by name before any step; never a traceback, never a silent difference.

Every run packs a long prompt, chunked by a 16-token budget, into the steps of short requests that
decode (the batch mixing that exposes RoPE whose frequencies follow the longest position of a
forward), on a pool small enough to preempt. Each type gets prompts and a weight seed of its own.
The fast tier holds a representative subset; the slow tier runs every type against the pinned
outcomes in ``tests/fixtures/hf_family_matrix.json`` (regenerate with
``python -m kvbench.hf.matrix --json tests/fixtures/hf_family_matrix.json`` and review the diff).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.hf import features
from kvbench.hf.matrix import Outcome, decoder_types, run_type
from tests.hf_helpers import one_thread  # noqa: F401 (autouse: one torch thread)

PINNED = Path(__file__).parent / "fixtures" / "hf_family_matrix.json"
REFUSED = {  # type -> the refusal, pinned in full
    "doge": "DogeAttention: the model adds its own attention mask or bias (attention_mask), which the paged hook "
            "cannot apply (it builds causal and window masks itself)",
    "diffllama": "DiffLlamaForCausalLM: layer 0 calls the attention function 2 times per forward (e.g. differential "
                 "attention); the paged hook stores one K/V per layer and call",
    "jetmoe": "model tiny-jetmoe: the layers pass K/V of other heads or head sizes (K/V) to attention than the pool's "
              "2 heads x 16/16 (model.num_kv_heads, head_size, v_head_size): layer 0: 4 heads x 16/16; layer 1: 4 "
              "heads x 16/16",
    "gemma4_text": "gemma4_text: head_dim varies across layers (per_layer_config); the KV pool holds one K/V geometry "
                   "for every layer",
    "llama4_text": "llama4_text: chunked attention (attention_chunk_size 8) is not implemented by the paged hook; "
                   "model.max_model_len 256 exceeds it",
    "bloom": "bloom: ALiBi position biases are not implemented by the paged hook",
    "gpt_oss": "GptOssAttention: attention argument(s) s_aux (e.g. attention sinks or chunked attention) are not "
               "implemented by the paged hook",
}
EXACT = ("llama", "deepseek_v3", "minicpm3", "modernbert-decoder", "cohere", "gpt_bigcode", "gemma2", "qwen3_moe")


def assert_exact(outcome: Outcome) -> None:
    assert outcome.outcome == "exact", outcome
    mixed = int(outcome.detail.split(" mixed steps")[0].rsplit(" ", 1)[1])
    assert mixed > 0, f"{outcome.model_type}: no step mixed a prefill chunk with decodes ({outcome.detail})"


@pytest.mark.parametrize("model_type", EXACT)
def test_types_that_run_equal_generate_with_batch_mixing(model_type):
    """MLA (DeepSeek-V3, MiniCPM3: K and V of different head sizes), a prediction head before the decoder
    (ModernBERT), logit scaling (Cohere), multi-query (GPTBigCode), soft-caps and windows (Gemma-2), MoE."""
    assert_exact(run_type(model_type))


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_types_the_hook_cannot_honour_are_refused_by_name(model_type):
    outcome = run_type(model_type)
    assert (outcome.outcome, outcome.detail) == ("refused", REFUSED[model_type])


def _longrope(original: int) -> dict:
    return dict(rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0] * 8,
                                     long_factor=[4.0] * 8, original_max_position_embeddings=original),
                original_max_position_embeddings=original)


DYNAMIC = dict(rope_parameters=dict(rope_type="dynamic", factor=4.0, rope_theta=10000.0), max_position_embeddings=32)


@pytest.mark.parametrize("model_type,overrides,threshold", [("phi3", _longrope(32), 32), ("llama", DYNAMIC, 32)],
                         ids=["phi3-longrope", "llama-dynamic"])
def test_rope_that_follows_the_longest_position_is_refused_past_its_threshold(model_type, overrides, threshold,
                                                                               monkeypatch):
    outcome = run_type(model_type, **overrides)
    rope_type = overrides["rope_parameters"]["rope_type"]
    assert (outcome.outcome, outcome.detail) == ("refused", (
        f"{model_type}: rope_type {rope_type} changes its frequencies when the longest position in a forward passes "
        f"{threshold}, for every sequence of the packed batch at once; model.max_model_len 256 allows that (set it "
        f"to {threshold} or less to run this model exactly)"))
    monkeypatch.setattr(features, "_check_rope", lambda *args: None)  # without the guard: silently different
    assert run_type(model_type, **overrides).outcome == "different"


def test_rope_and_llama4_features_run_exactly_where_they_cannot_act():
    """Below the threshold every forward uses the original frequencies; Llama-4's chunked attention and
    NoPE temperature tuning are no-ops while sequences fit one chunk and positions stay below floor_scale."""
    assert_exact(run_type("phi3", max_model_len=64, **_longrope(64)))
    assert_exact(run_type("llama4_text", max_model_len=64, attention_chunk_size=64))
    tuned = run_type("llama4_text", max_model_len=64, attention_chunk_size=64, floor_scale=8)
    assert (tuned.outcome, tuned.detail) == ("refused", (
        "llama4_text: NoPE attention temperature tuning scales queries by their index in the forward (floor_scale "
        "8); packed steps or sequences of 64 tokens would change it (the paged hook needs max_model_len and the "
        "step's token budget below floor_scale)"))


def test_doge_without_the_mask_guard_is_silently_different(monkeypatch):
    """The refusal above is needed: the hook alone would drop Doge's dynamic-mask bias."""
    read = features.read_layer
    monkeypatch.setattr("kvbench.hf.attention.read_layer",
                        lambda module, query, scaling, dropout, kwargs, attention_mask=None:
                        read(module, query, scaling, dropout, kwargs))
    assert run_type("doge").outcome == "different"


@pytest.mark.slow
def test_every_decoder_type_runs_exactly_or_is_refused_as_pinned():
    pinned = {row["model_type"]: row for row in json.loads(PINNED.read_text())}
    assert sorted(pinned) == decoder_types(), "the installed transformers has other decoder types: regenerate"
    bad, changed = [], []
    for model_type in decoder_types():
        outcome = run_type(model_type)
        if outcome.outcome in ("different", "crash"):
            bad.append(outcome)
        want = pinned[model_type]
        if outcome.outcome != want["outcome"] or (outcome.outcome == "refused" and outcome.detail != want["detail"]):
            changed.append((model_type, want["outcome"], outcome.outcome, outcome.detail))
        if outcome.outcome == "exact":
            assert_exact(outcome)
    assert not bad, bad
    assert not changed, changed
