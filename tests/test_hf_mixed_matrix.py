"""hf backend x the grouped allocators on the mixed-model families: the matrix of what runs.

Today every family below is refused by name in the pre-check with each grouped allocator (the hf
attention reads one block table per sequence, not one per layer group; state families also lack
a per-request recurrent update from the engine's state slots). This test pins each refusal, so a
family that starts to run must move to an equality test against ``generate``. (With ``paged`` the
hf family matrix, ``tests/test_hf_matrix.py``, runs gemma3_text and lfm2 exactly, every layer
holding every token.)
"""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

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
ONE_TABLE = "the hf attention reads one block table per sequence, not one per layer group"
NO_RECURRENCE = ("; and its state layers (Mamba / linear attention / short convolution) would need their own "
                 "recurrent update per request from the engine's state slots, which the hf executor does not run")


def _cfg(family: str, allocator: str, overrides: dict):
    config = transformers.AutoConfig.for_model(family, **overrides)
    model = {"name": f"tiny-{family}", "family": family, "max_model_len": 256, **hf_model_fields(config)}
    return OmegaConf.create({"allocator": {"name": allocator}, "model": model, "backend": {"name": "hf"},
                             "engine": {"preemption": "recompute", "max_num_batched_tokens": 16}})


@pytest.mark.parametrize("allocator", GROUPED)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_mixed_family_is_refused_by_name_on_hf(family, allocator):
    kinds, overrides = FAMILIES[family]
    cfg = _cfg(family, allocator, overrides)
    with pytest.raises(ConfigError) as err:
        group_knobs(cfg, KVGeometry.from_model_cfg(cfg.model), {})
    why = ONE_TABLE + (NO_RECURRENCE if "state" in kinds else "")
    assert str(err.value) == (f"allocator {allocator} on the mixed model tiny-{family} ({family}: {kinds} groups) "
                              f"runs on backend=sim only: {why}")
