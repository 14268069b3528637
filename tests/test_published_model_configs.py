"""The shipped mixed-model configs against their published config.json.

Each entry below holds the published fields that set a model's KV and state geometry (the
config.json of the named model, as copied in public repositories: transformers' docstrings and
test fixtures, inference engines' model tables). The test builds transformers' own config class
from them (on the CPU, nothing fetched), reads its layer groups the way the hf backend does
(``hf_model_fields``) and requires the shipped ``conf/model/*.yaml`` to give the same geometry.
A shape written wrong in a yaml fails here.
"""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.layer_groups import FULL_TYPES, STATE_TYPES, hf_model_fields, layer_groups

transformers = pytest.importorskip("transformers")

# yaml name -> (transformers model_type, published fields); "assumed" lists fields that are not
# from a published config (the yaml says so too).
PUBLISHED = {
    # google/gemma-3-27b-it, text_config
    "gemma-3-27b": ("gemma3_text", dict(
        num_hidden_layers=62, hidden_size=5376, num_attention_heads=32, num_key_value_heads=16, head_dim=128,
        sliding_window=1024, sliding_window_pattern=6, vocab_size=262208, max_position_embeddings=131072)),
    # openai/gpt-oss-120b
    "gpt-oss-120b": ("gpt_oss", dict(
        num_hidden_layers=36, hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        sliding_window=128, vocab_size=201088, max_position_embeddings=131072, num_local_experts=128)),
    # openai/gpt-oss-20b
    "gpt-oss-20b": ("gpt_oss", dict(
        num_hidden_layers=24, hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        sliding_window=128, vocab_size=201088, max_position_embeddings=131072, num_local_experts=32)),
    # meta-llama/Llama-4-Scout-17B-16E, text_config (no_rope_layers [1, 1, 1, 0] * 12)
    "llama-4-scout": ("llama4_text", dict(
        num_hidden_layers=48, hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        attention_chunk_size=8192, no_rope_layers=[1, 1, 1, 0] * 12, vocab_size=202048)),
    # Qwen/Qwen3-Next-80B-A3B-Instruct
    "qwen3-next-80b-a3b": ("qwen3_next", dict(
        num_hidden_layers=48, hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
        full_attention_interval=4, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=151936, max_position_embeddings=262144)),
    # ai21labs/AI21-Jamba-1.5-Mini
    "jamba-1.5-mini": ("jamba", dict(
        num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        attn_layer_offset=4, attn_layer_period=8, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
        vocab_size=65536, max_position_embeddings=262144)),
    # tiiuae/Falcon-H1-34B: the shapes table of transformers' FalconH1 documentation (depth 72, dim 5120,
    # 20 attention heads, 4 KV heads, 32 Mamba heads, head dims 128 / 128, d_state 256)
    "falcon-h1-34b": ("falcon_h1", dict(
        num_hidden_layers=72, hidden_size=5120, num_attention_heads=20, num_key_value_heads=4, head_dim=128,
        mamba_n_heads=32, mamba_d_head=128, mamba_d_ssm=32 * 128, mamba_d_state=256,
        mamba_n_groups=1, mamba_d_conv=4)),  # assumed: n_groups, d_conv (the published config.json not found)
}
COMPARED = ("num_layers", "layer_types", "num_kv_heads", "head_size", "sliding_window", "attention_chunk_size",
            "state_bytes_per_layer")


def _published_fields(family: str, fields: dict) -> dict:
    config = transformers.AutoConfig.for_model(family, **fields)
    return hf_model_fields(config, dtype="bfloat16")


def _kinds(types) -> list[str]:
    """Layer kinds as kvbench groups them: transformers' names and the yaml's may differ
    (``attention`` / ``full_attention``, ``mamba`` / ``linear_attention``)."""
    return ["full" if t in FULL_TYPES else "state" if t in STATE_TYPES else t for t in types]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_shipped_yaml_has_the_published_geometry(name):
    family, fields = PUBLISHED[name]
    shipped = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    published = _published_fields(family, fields)
    assert shipped["family"] == family
    for key in COMPARED:
        want, got = published.get(key), shipped.get(key)
        if key == "layer_types":
            want, got = _kinds(want), _kinds(got)
        if key in ("sliding_window", "attention_chunk_size") and not any(
                t in ("sliding_attention", "chunked_attention") for t in published["layer_types"]):
            continue  # transformers keeps a default window on models whose layers never slide
        assert got == want, (name, key)
    for key, yaml_key in (("hidden_size", "hidden_size"), ("num_attention_heads", "num_heads"),
                          ("vocab_size", "vocab_size")):
        if key in fields:
            assert shipped[yaml_key] == fields[key], (name, yaml_key)
    # and the groups (bytes per token and per request) agree, as the allocators see them
    published["max_model_len"] = shipped["max_model_len"]
    assert layer_groups(shipped) == layer_groups(published)
