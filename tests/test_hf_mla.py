"""MLA geometry (the sim's latent bytes, the hf pool's per-head K/V) and the pretrained path's eager fallback."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.spec import model_geometry
from kvbench.geometry import KVGeometry

# DeepSeek-V3: 61 layers, 128 heads, K 128 + 64 (nope + rope), V 128, latent 512 + rope key 64, bfloat16
DEEPSEEK_V3 = dict(name="deepseek-v3", num_layers=61, num_kv_heads=128, head_size=192, v_head_size=128,
                   kv_lora_rank=512, qk_rope_head_dim=64, dtype="bfloat16")


def test_mla_counts_the_latent_per_layer_and_the_pool_the_expanded_heads():
    geometry = KVGeometry.from_model_cfg(OmegaConf.create(DEEPSEEK_V3))
    assert geometry.latent_size == 576
    assert geometry.bytes_per_slot == 61 * 576 * 2 == 70_272  # one latent + rope key per layer, not per head
    assert geometry.pool_bytes_per_slot == 61 * 128 * (192 + 128) * 2 == 4_997_120
    assert geometry.slots_for(70_272 * 1000) == 1000
    no_latent = KVGeometry.from_model_cfg(OmegaConf.create({**DEEPSEEK_V3, "kv_lora_rank": None,
                                                             "qk_rope_head_dim": None}))
    assert no_latent.bytes_per_slot == no_latent.pool_bytes_per_slot == 4_997_120
    with pytest.raises(ValueError, match="set together or not at all"):
        KVGeometry.from_model_cfg(OmegaConf.create({**DEEPSEEK_V3, "qk_rope_head_dim": None}))


def test_every_configured_model_keeps_its_classic_byte_count():
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        geometry = KVGeometry.from_model_cfg(cfg)
        if geometry.groups and any(g.kind == "state" for g in geometry.groups):
            continue  # state layers (Mamba) hold no per-token K/V: kvbench.layer_groups counts them
        classic = 2 * int(cfg.num_layers) * int(cfg.num_kv_heads) * int(cfg.head_size) * geometry.dtype_bytes
        assert geometry.bytes_per_slot == geometry.pool_bytes_per_slot == classic, path.name


def test_mla_knobs_are_validated():
    from kvbench.config.validate import check_rules
    from tests.test_hf_executor import composed

    cfg = composed(["backend=hf", "model=tiny-llama", "+model.v_head_size=0"])
    with pytest.raises(ConfigError, match="model.v_head_size must be an integer >= 1"):
        check_rules(cfg)


def test_an_mla_executor_stores_expanded_heads_and_sizes_its_default_pool_to_fit():
    from kvbench.executors.hf import HFExecutor, default_kv_cache_bytes
    from kvbench.hf.matrix import build_tiny, model_cfg_of, tiny_config

    model = build_tiny(tiny_config("deepseek_v3"), seed=0)
    cfg = model_cfg_of(model, "tiny-deepseek-v3")
    assert (cfg.head_size, cfg.v_head_size, cfg.kv_lora_rank, cfg.qk_rope_head_dim) == (24, 12, 16, 8)
    executor = HFExecutor(cfg, OmegaConf.create({"attention": "torch"}), num_slots=32, block_size=4, device="cpu",
                          model=model, geometry=model_geometry(cfg))
    assert executor.pool.data is None
    assert executor.pool.key_caches[0].shape == (8, 4, 4, 24) and executor.pool.value_caches[0].shape == (8, 4, 4, 12)
    geometry = KVGeometry.from_model_cfg(cfg)
    assert executor.pool.nbytes == 32 * geometry.pool_bytes_per_slot
    full = OmegaConf.create({"model": cfg, "engine": {"max_num_seqs": 100_000}})
    kv_bytes = default_kv_cache_bytes(full, "cpu", geometry=model_geometry(full.model))
    # the latent accounting's slots, stored expanded, fill the CPU default of 256 MiB
    assert geometry.slots_for(kv_bytes) * geometry.pool_bytes_per_slot <= 256 * 2**20
    assert (geometry.slots_for(kv_bytes) + 1) * geometry.pool_bytes_per_slot > 256 * 2**20 - geometry.pool_bytes_per_slot


@pytest.mark.parametrize("model_type,outcome", [("vaultgemma", "exact"), ("bloom", "refused"), ("deepseek_v3", "exact")])
def test_pretrained_models_without_sdpa_fall_back_to_eager(tmp_path, model_type, outcome):
    """Saved tiny models loaded with model.load=pretrained: an architecture without SDPA loads with its
    eager attention and runs exactly, or is refused for its real reason (Bloom: ALiBi), not for SDPA;
    an MLA model's geometry (v_head_size, kv_lora_rank, qk_rope_head_dim) is checked and it runs exactly."""
    from kvbench.hf.matrix import _requests, build_tiny, generate, model_cfg_of, run_model, tiny_config
    from kvbench.hf.model import build_model

    torch.set_num_threads(1)
    reference = build_tiny(tiny_config(model_type), seed=3)
    reference.save_pretrained(tmp_path)
    cfg = model_cfg_of(reference, f"tiny-{model_type}")
    cfg.load, cfg.path = "pretrained", str(tmp_path)
    model = build_model(cfg)
    assert model.config._attn_implementation == ("sdpa" if model_type == "deepseek_v3" else "eager")
    requests = _requests(model_type, 256)
    result = run_model(model_type, model, requests, {r.request_id: generate(reference, r) for r in requests})
    assert result.outcome == outcome, result
    if outcome == "refused":
        assert result.detail == "bloom: ALiBi position biases are not implemented by the paged hook"


def test_the_sim_sizes_an_mla_pool_by_its_latent(tmp_path):
    """Llama-3-8B's shape with MLA attention (latent 512 + rope 64, K 192 / V 128 per head): the sim's
    pool holds kv_bytes / (32 layers x 576 x 2 bytes) slots, 3.6x the slots of its per-head K/V."""
    from kvbench.run.lifecycle import run
    from tests.test_hf_executor import composed

    common = ["backend=sim", "model=llama-3-8b", "workload=synthetic", "workload.num_requests=8",
              "workload.prompt_len=64", "workload.output_len=16", "progress=false", "logger=none",
              f"results_dir={tmp_path}", "gpu=a100-80gb", "engine.kv_cache_bytes=1e9"]
    mla = ["model.name=llama-3-8b-mla", "+model.kv_lora_rank=512", "+model.qk_rope_head_dim=64",
           "+model.v_head_size=128", "model.head_size=192", "model.num_kv_heads=32"]
    plain, latent = run(composed(common)), run(composed(common + mla))
    assert latent["kv_slots"] == 10**9 // (32 * 576 * 2) // 16 * 16
    assert plain["kv_slots"] == 10**9 // (2 * 32 * 8 * 128 * 2) // 16 * 16
    assert latent["num_finished"] == plain["num_finished"] == 8
