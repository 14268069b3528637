"""Every state-layer formula against vLLM's state shapes.

vLLM sizes a state layer's per-request state with ``MambaStateShapeCalculator``
(vllm/model_executor/layers/mamba/mamba_utils.py): ``mamba1_state_shape``, ``mamba2_state_shape``,
``gated_delta_net_state_shape``, ``short_conv_state_shape``; each model's
``get_mamba_state_shape_from_config`` (vllm/model_executor/models/<family>.py) picks the arguments.
Every convolution keeps ``kernel - 1`` past inputs. Below: each family's bytes worked out by hand
from those shapes (one GPU, no speculative tokens, bfloat16), then, where ``make peers`` installed
vLLM, the same from vLLM's own calculator.
"""
from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.layer_groups import STATE_TYPES, state_bytes_from_hf

transformers = pytest.importorskip("transformers")

BF16 = 2

# family -> (small transformers config fields, bytes per layer worked out by hand)
FAMILIES = {
    # short_conv_state_shape(intermediate_size=conv_dim, conv_kernel=conv_L_cache): (3 - 1) x 64
    "lfm2": (dict(hidden_size=64, conv_L_cache=3, full_attn_idxs=[1]), 2 * 64 * BF16),
    # lfm2_moe.py passes hidden_size: (4 - 1) x 64
    "lfm2_moe": (dict(hidden_size=64, conv_L_cache=4, full_attn_idxs=[1]), 3 * 64 * BF16),
    # mamba1_state_shape(intermediate_size=expand*hidden=128, state_size=8, conv_kernel=4):
    # conv (4 - 1) x 128, SSM 128 x 8
    "jamba": (dict(hidden_size=64, mamba_expand=2, mamba_d_state=8, mamba_d_conv=4), (3 * 128 + 128 * 8) * BF16),
    # mamba2_state_shape(intermediate_size=mamba_d_ssm=96, n_groups=2, heads=4, head_dim=24, state 8,
    # kernel 3): conv (3 - 1) x (96 + 2*2*8), SSM 4 x 24 x 8
    "falcon_h1": (dict(hidden_size=64, mamba_d_ssm=96, mamba_n_heads=4, mamba_d_head=24, mamba_n_groups=2,
                       mamba_d_state=8, mamba_d_conv=3), (2 * (96 + 32) + 4 * 24 * 8) * BF16),
    # granitemoehybrid.py: intermediate_size=expand*hidden=128, groups 1, heads 4 x 32, state 8, kernel 4
    "granitemoehybrid": (dict(hidden_size=64, mamba_expand=2, mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1,
                              mamba_d_state=8, mamba_d_conv=4), (3 * (128 + 16) + 4 * 32 * 8) * BF16),
    # bamba (vLLM's bamba.py, removed in 0.23, passed expand*hidden as granitemoehybrid.py does)
    "bamba": (dict(hidden_size=64, mamba_expand=2, mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1,
                   mamba_d_state=8, mamba_d_conv=4, attn_layer_indices=[1]), (3 * (128 + 16) + 4 * 32 * 8) * BF16),
    # nemotron_h.py: intermediate_size=heads*head_dim=64, n_groups 2, state 8, kernel 4
    "nemotron_h": (dict(hidden_size=64, mamba_num_heads=4, mamba_head_dim=16, n_groups=2, ssm_state_size=8,
                        conv_kernel=4), (3 * (64 + 32) + 4 * 16 * 8) * BF16),
    # gated_delta_net_state_shape(k_heads 2, v_heads 4, k_dim 8, v_dim 16, kernel 4):
    # conv (4 - 1) x (2*2*8 + 4*16), recurrent 4 x 16 x 8
    "qwen3_next": (dict(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                        linear_value_head_dim=16, linear_conv_kernel_dim=4), (3 * (32 + 64) + 4 * 16 * 8) * BF16),
}

# shipped yaml -> (family, the published fields that size its state, bytes per layer by hand)
SHIPPED = {
    # mamba1: intermediate 2 * 4096 = 8192, state 16, kernel 4: 3 x 8192 + 8192 x 16
    "jamba-1.5-mini": ("jamba", dict(hidden_size=4096, mamba_expand=2, mamba_d_state=16, mamba_d_conv=4),
                       (3 * 8192 + 8192 * 16) * BF16),
    # gated delta net: conv 3 x (2*16*128 + 32*128), recurrent 32 x 128 x 128
    "qwen3-next-80b-a3b": ("qwen3_next", dict(hidden_size=2048, linear_num_key_heads=16, linear_num_value_heads=32,
                                              linear_key_head_dim=128, linear_value_head_dim=128,
                                              linear_conv_kernel_dim=4), (3 * 8192 + 32 * 128 * 128) * BF16),
    # mamba2: d_ssm 4096, 1 group, state 256, kernel 4: conv 3 x (4096 + 512), SSM 32 x 128 x 256
    "falcon-h1-34b": ("falcon_h1", dict(hidden_size=5120, mamba_d_ssm=4096, mamba_n_heads=32, mamba_d_head=128,
                                        mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4),
                      (3 * 4608 + 32 * 128 * 256) * BF16),
}


def _config(family: str, fields: dict):
    return transformers.AutoConfig.for_model(family, **fields)


def _has_state(model: dict) -> bool:
    return any(t in STATE_TYPES or t == "hybrid" for t in model.get("layer_types") or ())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_s_state_bytes_are_vllm_s_by_hand(family):
    fields, want = FAMILIES[family]
    assert state_bytes_from_hf(_config(family, fields), BF16) == want


def test_every_shipped_model_with_state_layers_is_checked():
    shipped = {p.stem for p in (CONF_DIR / "model").glob("*.yaml") if _has_state(OmegaConf.load(p))}
    assert shipped == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_state_bytes_are_vllm_s_by_hand(name):
    family, fields, want = SHIPPED[name]
    assert OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")["state_bytes_per_layer"] == want
    assert state_bytes_from_hf(_config(family, fields), BF16) == want


def _vllm_shapes(family: str, c) -> tuple[tuple[int, ...], ...]:
    """The shapes vLLM gives the family, called as its model's ``get_mamba_state_shape_from_config``
    calls the calculator (one GPU, no speculative tokens)."""
    calc = pytest.importorskip("vllm.model_executor.layers.mamba.mamba_utils").MambaStateShapeCalculator
    if family == "lfm2":  # lfm2.py
        return calc.short_conv_state_shape(1, getattr(c, "conv_dim", None) or c.hidden_size, c.conv_L_cache)
    if family == "lfm2_moe":  # lfm2_moe.py
        return calc.short_conv_state_shape(1, c.hidden_size, c.conv_L_cache)
    if family == "jamba":  # jamba.py
        return calc.mamba1_state_shape(1, c.mamba_expand * c.hidden_size, c.mamba_d_state, c.mamba_d_conv)
    if family == "qwen3_next":  # qwen3_next.py
        return calc.gated_delta_net_state_shape(1, c.linear_num_key_heads, c.linear_num_value_heads,
                                                c.linear_key_head_dim, c.linear_value_head_dim,
                                                c.linear_conv_kernel_dim, 0)
    if family == "nemotron_h":  # nemotron_h.py
        return calc.mamba2_state_shape(1, c.mamba_num_heads * c.mamba_head_dim, c.n_groups, c.mamba_num_heads,
                                       c.mamba_head_dim, c.ssm_state_size, c.conv_kernel)
    if family == "falcon_h1":  # falcon_h1.py
        inner = int(c.mamba_expand * c.hidden_size) if c.mamba_d_ssm is None else c.mamba_d_ssm
    else:  # granitemoehybrid.py (and bamba.py while vLLM had it)
        inner = c.mamba_expand * c.hidden_size
    return calc.mamba2_state_shape(1, inner, c.mamba_n_groups, c.mamba_n_heads, c.mamba_d_head, c.mamba_d_state,
                                   c.mamba_d_conv)


@pytest.mark.parametrize("case", [*(("family", f) for f in sorted(FAMILIES)), *(("shipped", n) for n in sorted(SHIPPED))],
                         ids=lambda case: case[1])
def test_state_bytes_equal_vllm_s_calculator(case):
    kind, key = case
    family, fields = (key, FAMILIES[key][0]) if kind == "family" else SHIPPED[key][:2]
    config = _config(family, fields)
    elements = sum(math.prod(shape) for shape in _vllm_shapes(family, config))
    assert state_bytes_from_hf(config, BF16) == elements * BF16
