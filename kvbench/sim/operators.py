"""Operator-level times of one transformer layer's non-attention work, on one tensor-parallel rank.

Each operator is a roofline plus a fixed cost per kind, ``time = <kind>_fixed_s + max(compute, memory)``:

    GEMM (m tokens, k in, n out):  compute = 2 m k n / (peak * eff)
                                   memory  = (m k + k n + m n) * dtype_bytes / (bw * gemm_eff_bw)
        eff = gemm_eff_max * m / (m + gemm_m_half) * n / (n + gemm_n_half) * k / (k + gemm_k_half)
    elementwise (norm, act, rope, add): memory only, bytes read + written / (bw * <kind>_eff_bw)

With ``op_model: fixed_floor`` (a GPU profile setting; ``roofline``, the formula above, is the
default) an elementwise kernel also has a minimum time that grows with its row width: the
kernels give each token row its own thread block(s), and a first wave of blocks takes as long
with one row as with a GPU full of them:

    elementwise (fixed_floor):     <kind>_fixed_s + max(tokens, <kind>_min_tokens) * bytes_per_token
                                                    / (bw * <kind>_eff_bw)

This is what the measured times show: a norm, activation or rotary kernel over 1 or 128 rows
takes the same time (A100: flat to about 128-192 tokens, H100 to about 256), and that time
scales with the row's bytes (hidden size, FFN width / TP). ``FLOOR_KEYS`` hold the
``<kind>_min_tokens``, fitted with the other constants on the measured tables only.

``eff`` is Hockney's half-performance form on each GEMM dimension: narrow GEMMs fill the
GPU's tiles and waves worse (NVIDIA, "Matrix Multiplication Background User's Guide": tile and
wave quantization). Tensor parallelism narrows n (QKV, up) or k (O, down) by the TP degree.
Each elementwise kind has its own achieved bandwidth (RMSNorm's reduction runs far below a
residual add's stream). The constants (``OP_KEYS``) are fitted per GPU on measured operator
times (``kvbench-validate --fit-ops``, data in ``kvbench/sim/data/vidur``).

Operator names follow the measurements: ``input_layernorm``, ``attn_pre_proj`` (QKV),
``attn_rope``, ``attn_post_proj`` (O), ``post_attention_layernorm``, ``mlp_up_proj`` (fc1, or
gate and up fused), ``mlp_act``, ``mlp_down_proj`` (fc2), ``add`` (one residual add, counted
once per layer as the measurements do). Attention is not here (``cost_model`` keeps it a
roofline): the measurements hold no attention kernel.

Every measured model is Llama-like (gated MLP, rotary, RMSNorm); OPT-style layers (fc1/fc2,
LayerNorm, no rotary) use the same constants, which only the end-to-end FasterTransformer GPT
rows check. The formulas take floats or numpy arrays alike (the validation evaluates thousands
at once).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_KIND = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rope",
                    "mlp_act": "act", "add": "add"}
OP_NAMES = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
            "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
KINDS = ("gemm", "norm", "act", "rope", "add")
OP_KEYS = ("gemm_eff_max", "gemm_m_half", "gemm_n_half", "gemm_k_half",
           *(f"{kind}_eff_bw" for kind in KINDS), *(f"{kind}_fixed_s" for kind in KINDS))
ELEMENTWISE_KINDS = ("norm", "act", "rope", "add")
FLOOR_KEYS = tuple(f"{kind}_min_tokens" for kind in ELEMENTWISE_KINDS)  # fixed_floor only
# op_model -> the constants it reads; "roofline" is the model every committed result used
OP_MODELS: dict[str, tuple[str, ...]] = {"roofline": OP_KEYS, "fixed_floor": OP_KEYS + FLOOR_KEYS}
DEFAULT_OP_MODEL = "roofline"


def gemm_s(c: Mapping[str, float], peak: float, bw: float, m, k, n, dtype_bytes: int):
    """Seconds of an (m x k) @ (k x n) GEMM; 0 where m is 0."""
    eff = (c["gemm_eff_max"] * m / (m + c["gemm_m_half"]) * n / (n + c["gemm_n_half"])
           * k / (k + c["gemm_k_half"]))
    compute = 2.0 * m * k * n / (peak * np.maximum(eff, 1e-12))
    memory = (m * k + k * n + m * n) * dtype_bytes / (bw * c["gemm_eff_bw"])
    return np.where(m > 0, c["gemm_fixed_s"] + np.maximum(compute, memory), 0.0)


def elementwise_s(c: Mapping[str, float], bw: float, kind: str, nbytes, row_bytes: float = 0.0):
    """Seconds of a memory-bound kernel moving ``nbytes`` in rows of ``row_bytes``; 0 where
    nothing moves. With ``<kind>_min_tokens`` in ``c`` (``fixed_floor``) the kernel takes at
    least as long as over that many rows (see the module docstring)."""
    floor = c.get(f"{kind}_min_tokens")
    if floor is not None:
        nbytes = np.where(nbytes > 0, np.maximum(nbytes, floor * row_bytes), 0.0)
    return np.where(nbytes > 0, c[f"{kind}_fixed_s"] + nbytes / (bw * c[f"{kind}_eff_bw"]), 0.0)


@dataclass(frozen=True, slots=True)
class LayerShape:
    """One rank's share of a decoder layer: heads and FFN columns split ``tp`` ways (Megatron)."""

    hidden: int
    q_dim: int  # num_heads * head_size, whole model
    kv_dim: int  # num_kv_heads * head_size, whole model
    ffn: int  # intermediate size
    gated: bool  # gate/up/down MLP (one fused gate+up GEMM), else fc1/fc2
    rotary: bool  # rotary position embedding on Q and K
    tp: int
    dtype_bytes: int

    @classmethod
    def of_model(cls, model, tp: int, dtype_bytes: int) -> "LayerShape":
        hd = int(model.head_size)
        llama_like = model.family != "opt"
        return cls(int(model.hidden_size), int(model.num_heads) * hd, int(model.num_kv_heads) * hd,
                   int(model.intermediate_size), llama_like, llama_like, tp, dtype_bytes)

    def gemm_dims(self) -> dict[str, tuple[float, float]]:
        """(k, n) of each GEMM on one rank."""
        h, t = self.hidden, self.tp
        ffn = self.ffn / t
        return {
            "attn_pre_proj": (h, (self.q_dim + 2 * self.kv_dim) / t),
            "attn_post_proj": (self.q_dim / t, h),
            "mlp_up_proj": (h, 2 * ffn if self.gated else ffn),
            "mlp_down_proj": (ffn, h),
        }

    def elementwise_bytes_per_token(self) -> dict[str, float]:
        """Bytes read + written per token by each elementwise op on one rank."""
        h, t, b = self.hidden, self.tp, self.dtype_bytes
        ffn = self.ffn / t
        return {
            "input_layernorm": 2 * h * b,
            "post_attention_layernorm": 2 * h * b,
            "attn_rope": 2 * (self.q_dim + self.kv_dim) / t * b if self.rotary else 0.0,
            "mlp_act": (3 * ffn if self.gated else 2 * ffn) * b,
            "add": 3 * h * b,
        }

    def op_times(self, c: Mapping[str, float], peak: float, bw: float, tokens) -> dict[str, object]:
        """Seconds per operator (``OP_NAMES``) for ``tokens`` tokens (a float or an array)."""
        out = {op: gemm_s(c, peak, bw, tokens, k, n, self.dtype_bytes) for op, (k, n) in self.gemm_dims().items()}
        for op, per_token in self.elementwise_bytes_per_token().items():
            out[op] = elementwise_s(c, bw, ELEMENTWISE_KIND[op], tokens * per_token, per_token)
        return out

    def layer_s(self, c: Mapping[str, float], peak: float, bw: float, tokens) -> float:
        """The layer's non-attention time on one rank, all-reduces excluded."""
        return sum(self.op_times(c, peak, bw, tokens).values())
