"""hf backend x the grouped allocators on the mixed-model families: the matrix of what runs.

``RUNS``: families that pass the pre-check with every grouped allocator on backend=hf and equal
``generate`` there (``tests/test_hf_grouped.py``: gemma3_text with uniform, hybrid, hybrid_static
and lcm under preemption, and a prefix hit with hybrid_prefix / lcm_prefix). Every other family is
refused by name in the pre-check, with its reason: state layers (no per-request recurrent update
from the engine's state slots), chunked attention (no chunk mask), per-group head shapes (one pool
shape), attention sinks. A family that starts to run must move from ``REFUSED`` to ``RUNS``. (With
``paged`` the hf family matrix, ``tests/test_hf_matrix.py``, runs gemma3_text and lfm2 exactly,
every layer holding every token.)
"""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf, open_dict

from allocators import GROUPED
from kvbench.config.errors import ConfigError
from kvbench.geometry import KVGeometry
from kvbench.layer_groups import hf_model_fields
from kvbench.run.group_knobs import group_knobs

transformers = pytest.importorskip("transformers")

# family -> its groups' kinds, as the refusal names them; bamba and lfm2 name attention layers explicitly
FAMILIES = {
    "gemma3_text": ("full, window", {}),
    "gpt_oss": ("full, window", {}),
    "llama4_text": ("chunked, full", {}),
    "gemma4_text": ("full, window", {}),
    "qwen3_next": ("full, state", {}),
    "jamba": ("full, state", {}),
    "falcon_h1": ("full, state", {}),
    "granitemoehybrid": ("state", {}),
    "bamba": ("full, state", {"attn_layer_indices": [3, 7]}),
    "nemotron_h": ("full, state", {}),
    "lfm2": ("full, state", {"full_attn_idxs": [2, 5]}),
}
RUNS = ("gemma3_text",)
STATE = ("its state layers (Mamba / linear attention / short convolution) would need their own recurrent update "
         "per request from the engine's state slots, which the hf executor does not run")
REFUSED = {
    "gpt_oss": "its attention sinks (a learned logit per head in every softmax) are not implemented by the paged hook",
    "llama4_text": "the hf attention has no chunked-attention mask (attention within chunks of attention_chunk_size "
                   "tokens)",
    "gemma4_text": "its full and sliding layers differ in KV heads or head size (model.full_num_kv_heads / "
                   "full_head_size), and the hf pool holds one shape for every layer",
    **{family: STATE for family, (kinds, _) in FAMILIES.items() if "state" in kinds},
}


def _cfg(family: str, allocator: str, overrides: dict, **workload):
    config = transformers.AutoConfig.for_model(family, **overrides)
    model = {"name": f"tiny-{family}", "family": family, "max_model_len": 256, **hf_model_fields(config)}
    return OmegaConf.create({"allocator": {"name": allocator}, "model": model, "backend": {"name": "hf"},
                             "engine": {"preemption": "recompute", "max_num_batched_tokens": 16},
                             "workload": {"n": 1, "beam_width": 1, **workload}})


def test_every_family_either_runs_or_is_refused():
    assert set(RUNS) | set(REFUSED) == set(FAMILIES) and not set(RUNS) & set(REFUSED)


@pytest.mark.parametrize("allocator", GROUPED)
@pytest.mark.parametrize("family", RUNS)
def test_families_that_run_on_hf_pass_the_pre_check(family, allocator):
    kinds, overrides = FAMILIES[family]
    cfg = _cfg(family, allocator, overrides)
    knobs = {}
    group_knobs(cfg, KVGeometry.from_model_cfg(cfg.model), knobs)
    assert [g[0] for g in knobs["groups"]] == kinds.split(", ")


@pytest.mark.parametrize("workload", [{"n": 2}, {"beam_width": 2}])
def test_forks_of_a_mixed_model_are_refused_on_hf(workload):
    """A fork's copy-on-write of a partly filled block would name one layer group's slots only."""
    cfg = _cfg("gemma3_text", "hybrid", {}, **workload)
    with pytest.raises(ConfigError, match="runs on backend=hf with workload.n=1 and workload.beam_width=1 only"):
        group_knobs(cfg, KVGeometry.from_model_cfg(cfg.model), {})


@pytest.mark.parametrize("allocator", GROUPED)
@pytest.mark.parametrize("family", sorted(REFUSED))
def test_every_other_mixed_family_is_refused_by_name_on_hf(family, allocator):
    kinds, overrides = FAMILIES[family]
    cfg = _cfg(family, allocator, overrides)
    with pytest.raises(ConfigError) as err:
        group_knobs(cfg, KVGeometry.from_model_cfg(cfg.model), {})
    assert str(err.value) == (f"allocator {allocator} on the mixed model tiny-{family} ({family}: {kinds} groups) "
                              f"runs on backend=sim only: {REFUSED[family]}")


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_the_pre_check_gives_each_refused_family_its_reason(family, tmp_path):
    """Through the job's pre-check, as ``kvbench backend=hf ...`` runs it: the family's own reason,
    not the list of hf families (most of these are not hf families, and that check came first)."""
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR
    from kvbench.run.precheck import check_job

    kinds, overrides = FAMILIES[family]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["backend=hf", "allocator=hybrid", "engine.kv_cache_bytes=1e8",
                                           "engine.device=cpu", "logger=none", f"results_dir={tmp_path}"])
    model = _cfg(family, "hybrid", overrides).model
    with open_dict(cfg):  # a composed model (every field the checks read) turned into the tiny family
        cfg.model = OmegaConf.merge(cfg.model, {"num_heads": model.num_kv_heads}, model)
    with pytest.raises(ConfigError) as err:
        check_job(cfg)
    assert str(err.value) == (f"allocator hybrid on the mixed model tiny-{family} ({family}: {kinds} groups) "
                              f"runs on backend=sim only: {REFUSED[family]}")
