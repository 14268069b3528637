"""What each layer asks of the paged-attention hook, checked before any step runs.

transformers' attention modules pass their features as arguments of the attention function: the
softmax ``scaling`` (1/sqrt(head_dim), Gemma's ``query_pre_attn_scalar``, OPT's pre-scaled 1.0),
``sliding_window`` (Mistral, Qwen2, Starcoder2, Phi-3, Gemma-2/3 per layer) and ``softcap``
(Gemma-2's ``attn_logit_softcapping``). The hook honours those three. Anything else that could
change the result (attention sinks, non-causal attention, dropout, an unknown argument with a
value) raises ``UnsupportedAttention`` naming it, and so do model-level features the hook never
sees: ALiBi (Bloom, MPT, Falcon with ``alibi``), bidirectional attention, logit scaling.

``probe_layers`` runs the model once on a single token with a recording hook (no pool, no step),
so an executor refuses a model at construction, never halfway through a run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvbench.config import ConfigError

# Arguments transformers passes along that do not change attention with packed position_ids.
IGNORED_KWARGS = frozenset({"position_ids", "use_cache", "output_router_logits", "output_attentions",
                            "cache_position", "past_key_values", "past_key_value"})


class UnsupportedAttention(ConfigError):
    """The model uses an attention feature the paged hook does not implement."""


@dataclass(frozen=True, slots=True)
class LayerAttention:
    """The features one layer's attention call asked for."""

    scale: float
    window: int | None = None  # keys per query, itself included
    softcap: float | None = None


def read_layer(module, query: torch.Tensor, scaling, dropout, kwargs: dict) -> LayerAttention:
    """The features of one attention call, or UnsupportedAttention naming what cannot be honoured."""
    name = type(module).__name__
    if dropout:
        raise UnsupportedAttention(f"{name}: attention dropout {dropout} (the model is in training mode)")
    if scaling is None:
        scaling = getattr(module, "scaling", query.shape[-1] ** -0.5)
    window = kwargs.get("sliding_window")
    softcap = kwargs.get("softcap")
    if kwargs.get("is_causal", True) is False:
        raise UnsupportedAttention(f"{name}: non-causal (bidirectional) attention")
    unknown = sorted(k for k, v in kwargs.items()
                     if k not in IGNORED_KWARGS and k not in ("sliding_window", "softcap", "is_causal")
                     and v is not None and v is not False)
    if unknown:
        raise UnsupportedAttention(f"{name}: attention argument(s) {', '.join(unknown)} (e.g. attention sinks "
                                   "or chunked attention) are not implemented by the paged hook")
    if window is not None and (isinstance(window, bool) or int(window) < 1):
        raise UnsupportedAttention(f"{name}: sliding_window {window!r}")
    if softcap is not None and not (math.isfinite(float(softcap)) and float(softcap) > 0):
        raise UnsupportedAttention(f"{name}: softcap {softcap!r}")
    return LayerAttention(float(scaling), None if window is None else int(window),
                          None if softcap is None else float(softcap))


def check_model_features(config) -> None:
    """Model-level features outside the attention call that the executor cannot reproduce."""
    model_type = getattr(config, "model_type", type(config).__name__)
    if getattr(config, "alibi", False) or getattr(config, "position_embedding_type", None) == "alibi" \
            or model_type in ("bloom", "mpt"):
        raise UnsupportedAttention(f"{model_type}: ALiBi position biases are not implemented by the paged hook")
    if getattr(config, "use_bidirectional_attention", False):
        raise UnsupportedAttention(f"{model_type}: bidirectional attention (use_bidirectional_attention)")
    for key in ("logit_scale", "logits_scaling"):
        value = getattr(config, key, None)
        if value not in (None, 1, 1.0):
            raise UnsupportedAttention(f"{model_type}: output logit scaling {key}={value} is not applied by the "
                                       "executor")


@dataclass(slots=True)
class AttentionProbe:
    """Installed instead of a StepAttention: the hook records each layer's features and returns zeros."""

    layers: dict[int, LayerAttention]


def probe_layers(model, num_layers: int) -> list[LayerAttention]:
    """Run ``model`` (already on the paged hook) on one token; every layer's LayerAttention, in order.

    Raises UnsupportedAttention for a feature the hook cannot honour, and ConfigError when some
    layer does not call the hook (a model that bypasses transformers' attention registry)."""
    from kvbench.hf.attention import step_attention

    check_model_features(model.config)
    probe = AttentionProbe({})
    device = next(model.parameters()).device
    ids = torch.zeros((1, 1), dtype=torch.int64, device=device)
    with torch.inference_mode(), step_attention(probe):
        model.base_model(input_ids=ids, position_ids=ids, use_cache=False)
    missing = [layer for layer in range(num_layers) if layer not in probe.layers]
    if missing:
        raise ConfigError(f"{type(model).__name__}: layer(s) {missing} do not call the paged attention hook; this "
                          "model does not route attention through transformers' AttentionInterface")
    return [probe.layers[layer] for layer in range(num_layers)]


def check_windows(layers: list[LayerAttention], windows: tuple[int | None, ...], model_name: str) -> None:
    """The model's per-layer windows must be the config's (the geometry the allocators read)."""
    got = tuple(layer.window for layer in layers)
    expected = windows or (None,) * len(layers)
    if got != expected:
        wrong = [f"layer {i}: model {g}, config {e}" for i, (g, e) in enumerate(zip(got, expected)) if g != e]
        raise ConfigError(f"model {model_name}: sliding windows differ from model.sliding_window / "
                          f"model.layer_types ({'; '.join(wrong[:4])}{'; ...' if len(wrong) > 4 else ''})")
