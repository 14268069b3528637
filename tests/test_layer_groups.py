"""Layer groups of mixed models: read from transformers' config classes (built on the CPU, nothing
fetched), from the shipped model configs, and the pool they give each grouped allocator."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from allocators import GROUPED
from kvbench.config.errors import CONF_DIR
from kvbench.geometry import KVGeometry
from kvbench.layer_groups import hf_layer_types, hf_model_fields, is_uniform, layer_groups, state_bytes_from_hf

transformers = pytest.importorskip("transformers")

# family -> (kinds of its groups, in order) for transformers' default config of the family
HF_FAMILIES = {
    "gemma3_text": ("full", "window"),
    "gpt_oss": ("full", "window"),
    "llama4_text": ("full", "chunked"),
    "gemma4_text": ("full", "window"),
    "qwen3_next": ("full", "state"),
    "jamba": ("full", "state"),
    "falcon_h1": ("full", "state"),
    "granitemoehybrid": ("state",),
    "bamba": ("full", "state"),
    "nemotron_h": ("full", "state"),
    "lfm2": ("full", "state"),
}


def _model_of(config) -> dict:
    return hf_model_fields(config)


@pytest.mark.parametrize("family", sorted(HF_FAMILIES))
def test_every_hybrid_family_of_transformers_maps_to_its_groups(family):
    from transformers import AutoConfig

    config = AutoConfig.for_model(family)
    if family == "bamba":  # its default names no attention layer; the published models do
        config = AutoConfig.for_model(family, attn_layer_indices=[3, 7])
    if family == "lfm2":  # likewise: every layer attends by default
        config = AutoConfig.for_model(family, full_attn_idxs=[2, 5])
    groups = layer_groups(_model_of(config))
    want = HF_FAMILIES[family] if family != "granitemoehybrid" else tuple(
        k for k in ("full", "state") if k in {g.kind for g in layer_groups(_model_of(config))})
    assert tuple(g.kind for g in groups) == want
    assert sum(g.num_layers for g in groups if g.kind != "state") + sum(
        g.num_layers for g in groups if g.kind == "state") >= len(hf_layer_types(config))


def test_gemma4_global_layers_keep_their_own_head_size():
    from transformers import AutoConfig

    groups = layer_groups(_model_of(AutoConfig.for_model("gemma4_text")))
    full, window = groups
    # the default config: 4 KV heads of 256 on sliding layers, head_dim 512 on the global ones
    assert window.token_bytes // window.num_layers == 2 * 4 * 256 * 2
    assert full.token_bytes // full.num_layers == 2 * 4 * 512 * 2


def test_gemma3_groups_follow_the_five_to_one_pattern():
    from transformers import AutoConfig

    config = AutoConfig.for_model("gemma3_text", num_hidden_layers=12, sliding_window=512)
    groups = layer_groups(_model_of(config))
    assert [(g.kind, g.size, g.num_layers) for g in groups] == [("full", None, 2), ("window", 512, 10)]


def test_state_bytes_of_a_small_mamba2_config_by_hand():
    from transformers import AutoConfig

    config = AutoConfig.for_model("bamba", hidden_size=64, mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1,
                                  mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, attn_layer_indices=[1])
    # conv: (4*32 + 2*1*8) channels * 3 steps; SSM: 4 heads * 32 * 8
    assert state_bytes_from_hf(config, 2) == ((128 + 16) * 3 + 4 * 32 * 8) * 2


def _shipped(name: str):
    return OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")


def test_the_shipped_mixed_models_and_their_bytes():
    gemma = KVGeometry.from_model_cfg(_shipped("gemma-3-27b"))
    # 10 global and 52 sliding layers, 16 KV heads of 128 in bfloat16: 8192 bytes a layer and token
    assert [(g.kind, g.size, g.num_layers, g.token_bytes) for g in gemma.groups] == [
        ("full", None, 10, 81920), ("window", 1024, 52, 425984)]
    assert gemma.bytes_per_slot == 62 * 8192
    jamba = KVGeometry.from_model_cfg(_shipped("jamba-1.5-mini"))
    assert [(g.kind, g.num_layers) for g in jamba.groups] == [("full", 4), ("state", 28)]
    assert jamba.bytes_per_slot == 4 * 2 * 8 * 128 * 2  # state layers hold no per-token KV
    scout = KVGeometry.from_model_cfg(_shipped("llama-4-scout"))
    assert [(g.kind, g.size, g.num_layers) for g in scout.groups] == [("full", None, 12), ("chunked", 8192, 36)]


@pytest.mark.parametrize("name", ["llama-7b", "opt-125m", "phi-3-mini"])
def test_uniform_and_all_sliding_models_keep_their_classic_geometry(name):
    cfg = _shipped(name)
    geometry = KVGeometry.from_model_cfg(cfg)
    assert geometry.groups == ()
    assert geometry.bytes_per_slot == geometry.pool_bytes_per_slot
    assert is_uniform(layer_groups(cfg)) == (cfg.get("sliding_window") is None)


@pytest.mark.parametrize("types, message", [
    (["full_attention"], "must list 4 entries"),
    (["full_attention", "nope", "full_attention", "full_attention"], "must list 4 entries"),
])
def test_bad_layer_types_name_the_setting(types, message):
    model = {"num_layers": 4, "layer_types": types, "dtype": "float16", "max_model_len": 64,
             "num_kv_heads": 1, "head_size": 4}
    with pytest.raises(ValueError, match=message):
        layer_groups(model)


# -- the app: a uniform model pages alike on every grouped allocator ---------------------------
def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["backend=sim", "logger=none", "progress=false", *overrides])


@pytest.mark.parametrize("name", [n for n in GROUPED if not n.endswith("_prefix")])  # the others: paged_prefix
def test_on_a_uniform_model_a_sim_run_equals_paged(name, tmp_path):
    from kvbench.run.lifecycle import run

    common = ["model=opt-125m", "workload=synthetic", "workload.num_requests=40", "engine.kv_cache_bytes=7.55e7",
              f"results_dir={tmp_path}"]
    paged = run(_compose("allocator=paged", *common))
    other = run(_compose(f"allocator={name}", *common))
    skip = {"run_id", "allocator", "allocator_label", "wall_s", "schedule_s_per_token",  # host clock
            "sharing_saving_block_frac"}  # the paper's block count: paged's tables only (null here)
    differ = {k for k in paged if k not in skip and not _allocator_record(k) and paged[k] != other.get(k)}
    assert not {k for k in differ if not k.endswith(("_wall_s", "_time", "_at"))}, differ
    assert paged["num_preemptions"] > 0  # the pool is tight enough to matter


def test_a_mixed_model_run_counts_no_sharing_and_a_whole_breakdown(tmp_path):
    from kvbench.run.lifecycle import run

    summary = run(_compose("allocator=hybrid", "model=gemma-2-2b", "model.sliding_window=64", "workload=synthetic",
                           "workload.num_requests=30", "engine.kv_cache_bytes=2e8", f"results_dir={tmp_path}"))
    assert summary["num_finished"] == 30
    assert summary["sharing_saving_frac"] == 0.0  # one sample a request: nothing shared
    fractions = [summary[k] for k in ("mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac")]
    assert abs(sum(fractions) - 1) < 1e-9


def _allocator_record(column: str) -> bool:
    """The allocator group's own recorded leaves (cfg.allocator.*) and the set of recorded keys differ
    between two allocators by construction; every other setting and every measurement must match."""
    return column.startswith("cfg.allocator.") or column == "cfg_keys"
