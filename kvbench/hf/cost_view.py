"""The sim cost model's view of families it does not count itself, for ``engine.clock=virtual``.

``kvbench.sim.cost_model`` counts OPT and dense gate/up/down decoders. The other families the hf
backend builds map onto those, with the same attention geometry:

- two-matrix MLPs with biases and LayerNorm (``phi``, ``gpt2``, ``gpt_neox``, ``starcoder2``):
  OPT's MLP, two matrices of ``intermediate_size``;
- mixtures of experts (``mixtral``, ``qwen2_moe``, ``qwen3_moe``): a dense MLP as wide as the experts
  active per token (``num_experts_per_tok`` of them, plus Qwen2-MoE's shared expert), so the
  FLOPs are those of the routed tokens; the weights a step reads are every expert's (a batch of
  num_experts / num_experts_per_tok tokens or more touches them all; smaller decode batches are
  modelled slow, an upper bound).

- multi-head latent attention (``model.kv_lora_rank`` set: DeepSeek-V2/V3, MiniCPM3): MLA's own
  projections (Q directly or through ``q_lora_rank``, the latent and rope key down-projection, the
  latent's up-projection to per-head K-nope and V, the output), a dense gate/up/down MLP of
  ``intermediate_size`` (routed experts are not counted: give the active width there), QK over K's
  head size and PV over V's, and one latent row per layer and block read (the cost model's
  ``bytes_per_slot`` is ``KVGeometry``'s, the latent's).

A family the cost model counts is returned unchanged, so its numbers are the cost model's own.
"""
from __future__ import annotations

import dataclasses

from kvbench.geometry import DTYPE_BYTES
from kvbench.sim.cost_model import FAMILIES, CostParams

TWO_MATRIX_MLP = ("phi", "gpt2", "gpt_neox", "starcoder2")
MOE = {"mixtral": "llama", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}  # MoE family -> its dense counterpart


def _get(model_cfg, key: str, default=None):
    value = model_cfg.get(key) if hasattr(model_cfg, "get") else getattr(model_cfg, key, None)
    return default if value is None else value


def _experts(model_cfg) -> tuple[int, int, int, int]:
    """(experts, experts per token, expert MLP width, shared-expert width) of an MoE config, with the
    transformers defaults of each family where the config is silent."""
    family = str(model_cfg.family)
    per_token = int(_get(model_cfg, "num_experts_per_tok", 2))
    if family == "mixtral":
        return int(_get(model_cfg, "num_local_experts", 8)), per_token, int(model_cfg.intermediate_size), 0
    width = int(_get(model_cfg, "moe_intermediate_size", model_cfg.intermediate_size))
    shared = int(_get(model_cfg, "shared_expert_intermediate_size", 0)) if family == "qwen2_moe" else 0
    return int(_get(model_cfg, "num_experts", 60 if family == "qwen2_moe" else 128)), per_token, width, shared


def cost_view(model_cfg):
    """(a model config the cost model counts, the weight bytes a step reads or None for the cost model's
    own) for ``model_cfg``; unchanged for the families the cost model knows."""
    family = str(model_cfg.family)
    if family in TWO_MATRIX_MLP:
        view = model_cfg.copy()
        view.family = "opt"
        return view, None
    if family not in MOE:
        return model_cfg, None
    experts, per_token, width, shared = _experts(model_cfg)
    view = model_cfg.copy()
    view.family, view.intermediate_size = MOE[family], per_token * width + shared
    h, layers = int(model_cfg.hidden_size), int(model_cfg.num_layers)
    q_dim = int(model_cfg.num_heads) * int(model_cfg.head_size)
    kv_dim = int(model_cfg.num_kv_heads) * int(model_cfg.head_size)
    attention = 2 * h * q_dim + 2 * h * kv_dim
    mlp = 3 * h * (experts * width + shared) + h * experts  # every expert, the shared one, the router
    weights = layers * (attention + mlp) + int(model_cfg.vocab_size) * h
    return view, float(weights * DTYPE_BYTES[str(model_cfg.dtype)])


def mla_attention_params(model_cfg) -> int:
    """Weights of one MLA layer's attention projections."""
    h, heads = int(model_cfg.hidden_size), int(model_cfg.num_heads)
    qk, rope = int(model_cfg.head_size), int(model_cfg.qk_rope_head_dim)
    v, rank = int(_get(model_cfg, "v_head_size", qk)), int(model_cfg.kv_lora_rank)
    q_rank = _get(model_cfg, "q_lora_rank", None)
    q = h * heads * qk if q_rank is None else h * int(q_rank) + int(q_rank) * heads * qk
    return q + h * (rank + rope) + rank * heads * (qk - rope + v) + heads * v * h


def _mla_params(model_cfg, gpu_cfg, system_cfg, geometry):
    view = model_cfg.copy()
    if str(view.family) not in FAMILIES:
        view.family = "llama"
    params = CostParams.from_configs(view, gpu_cfg, system_cfg, geometry=geometry)
    h, layers, vocab = int(model_cfg.hidden_size), int(model_cfg.num_layers), int(model_cfg.vocab_size)
    linear = layers * (mla_attention_params(model_cfg) + 3 * h * int(model_cfg.intermediate_size))
    heads, v = int(model_cfg.num_heads), int(_get(model_cfg, "v_head_size", model_cfg.head_size))
    return dataclasses.replace(
        params, dense_flops_per_token=2.0 * linear,
        weight_read_bytes=float((linear + vocab * h) * DTYPE_BYTES[str(model_cfg.dtype)]),
        attn_flops_per_pair=2.0 * heads * (int(model_cfg.head_size) + v) * layers,
        segments_per_block=float(layers), segments_per_copy_op=float(layers))


def cost_params(model_cfg, gpu_cfg, system_cfg=None, *, geometry):
    """``CostParams.from_configs`` on ``cost_view(model_cfg)``, with the MoE weights a step reads, or
    MLA's counts (``kv_lora_rank`` set); ``geometry``: the model's ``KVGeometry`` (the run spec's)."""
    if _get(model_cfg, "kv_lora_rank", None) is not None:
        return _mla_params(model_cfg, gpu_cfg, system_cfg, geometry)
    view, weight_bytes = cost_view(model_cfg)
    params = CostParams.from_configs(view, gpu_cfg, system_cfg, geometry=geometry)
    return params if weight_bytes is None else dataclasses.replace(params, weight_read_bytes=weight_bytes)
