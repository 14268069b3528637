"""What each layer asks of the paged-attention hook, checked before any step runs.

transformers' attention modules pass their features as arguments of the attention function: the
softmax ``scaling`` (1/sqrt(head_dim), Gemma's ``query_pre_attn_scalar``, OPT's pre-scaled 1.0),
``sliding_window`` (Mistral, Qwen2, Starcoder2, Phi-3, Gemma-2/3 per layer) and ``softcap``
(Gemma-2's ``attn_logit_softcapping``). The hook honours those three. Anything else the call
receives that could change the result raises ``UnsupportedAttention`` naming it: an attention mask
or bias of the model's own (Doge's dynamic mask; the hook's name has no mask function, so a plain
causal model passes none), attention sinks, non-causal attention, dropout, an unknown argument with
a value. So do model-level features the hook never sees: ALiBi (Bloom, MPT, Falcon with ``alibi``),
bidirectional attention, RoPE whose frequencies depend on the longest position in the forward
(``dynamic``, ``longrope``) once a sequence may pass that threshold, Llama-4's chunked attention
and NoPE temperature tuning where they would act. What follows the last hidden state (a prediction
head, final norms, logit scaling or soft-capping) is the model's own: the executor runs the whole
model and keeps only the sampled rows' logits.

``kvbench.hf.probe.probe_layers`` runs the model once on a single token with a recording hook (no
pool, no step): each layer must call the hook exactly once, with K/V of the geometry's heads and
head sizes, so an executor refuses a model at construction, never halfway through a run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from kvbench.config.errors import ConfigError

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


def read_layer(module, query: torch.Tensor, scaling, dropout, kwargs: dict, attention_mask=None) -> LayerAttention:
    """The features of one attention call, or UnsupportedAttention naming what cannot be honoured."""
    name = type(module).__name__
    if attention_mask is not None:
        raise UnsupportedAttention(f"{name}: the model adds its own attention mask or bias (attention_mask), which "
                                   "the paged hook cannot apply (it builds causal and window masks itself)")
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


def check_model_features(config, max_model_len: int, max_step_tokens: int | None = None) -> None:
    """Model-level features outside the attention call that the executor cannot reproduce, for
    sequences of up to ``max_model_len`` tokens in steps of up to ``max_step_tokens`` (None: unbounded)."""
    model_type = getattr(config, "model_type", type(config).__name__)
    if getattr(config, "alibi", False) or getattr(config, "position_embedding_type", None) == "alibi" \
            or model_type in ("bloom", "mpt"):
        raise UnsupportedAttention(f"{model_type}: ALiBi position biases are not implemented by the paged hook")
    if getattr(config, "use_bidirectional_attention", False):
        raise UnsupportedAttention(f"{model_type}: bidirectional attention (use_bidirectional_attention)")
    if getattr(config, "index_topk", None):
        raise UnsupportedAttention(f"{model_type}: sparse attention over indexer-selected keys (index_topk "
                                   f"{config.index_topk}) is not implemented by the paged hook")
    _check_rope(config, model_type, max_model_len)
    _check_llama4(config, model_type, max_model_len, max_step_tokens)


def _rope_parameters(config) -> list[dict]:
    """The config's RoPE parameter sets: one, or one per layer type."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not isinstance(params, dict):
        return []
    if "rope_type" in params or "type" in params:
        return [params]
    return [value for value in params.values() if isinstance(value, dict)]


def _check_rope(config, model_type: str, max_model_len: int) -> None:
    """``dynamic`` and ``longrope`` RoPE pick their frequencies from the largest position of the whole
    forward: a short sequence packed with a long one would get the long one's. Exact only while no
    sequence can pass the threshold (then every forward uses the original frequencies)."""
    for params in _rope_parameters(config):
        rope_type = str(params.get("rope_type", params.get("type", "default")))
        if rope_type == "longrope":
            threshold = params.get("original_max_position_embeddings") \
                or getattr(config, "original_max_position_embeddings", None)
        elif "dynamic" in rope_type:
            threshold = getattr(config, "max_position_embeddings", None)
        else:
            continue
        if threshold is None or max_model_len > int(threshold):
            raise UnsupportedAttention(
                f"{model_type}: rope_type {rope_type} changes its frequencies when the longest position in a forward "
                f"passes {threshold}, for every sequence of the packed batch at once; model.max_model_len "
                f"{max_model_len} allows that (set it to {threshold} or less to run this model exactly)")


def _check_llama4(config, model_type: str, max_model_len: int, max_step_tokens: int | None) -> None:
    """Llama-4: chunked attention is a mask transformers builds (the hook gets none), and NoPE layers'
    temperature tuning scales queries by their index in the forward, not their position."""
    chunk = getattr(config, "attention_chunk_size", None)
    types = getattr(config, "layer_types", None) or ()
    if chunk and "chunked_attention" in types and max_model_len > int(chunk):
        raise UnsupportedAttention(f"{model_type}: chunked attention (attention_chunk_size {chunk}) is not "
                                   f"implemented by the paged hook; model.max_model_len {max_model_len} exceeds it")
    floor_scale = getattr(config, "floor_scale", None)
    nope = getattr(config, "no_rope_layers", None)
    if getattr(config, "attn_temperature_tuning", False) and floor_scale and nope and 0 in nope:
        longest = max(max_model_len, max_step_tokens or 0) if max_step_tokens is not None else None
        if longest is None or longest >= int(floor_scale):
            raise UnsupportedAttention(
                f"{model_type}: NoPE attention temperature tuning scales queries by their index in the forward "
                f"(floor_scale {floor_scale}); packed steps or sequences of {longest or 'unbounded'} tokens would "
                "change it (the paged hook needs max_model_len and the step's token budget below floor_scale)")


@dataclass(slots=True)
class AttentionProbe:
    """Installed instead of a StepAttention: the hook records each layer's features, the heads and head
    sizes of its K and V, and how often it was called, and returns zeros."""

    layers: dict[int, LayerAttention] = field(default_factory=dict)
    shapes: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # layer -> (Hkv, D of K, D of V)
    calls: dict[int, int] = field(default_factory=dict)

    def record(self, layer: int, features: LayerAttention, key: torch.Tensor, value: torch.Tensor) -> None:
        self.layers[layer] = features
        self.shapes[layer] = (key.shape[1], key.shape[-1], value.shape[-1])
        self.calls[layer] = self.calls.get(layer, 0) + 1


def check_shapes(probe: AttentionProbe, num_kv_heads: int, head_size: int, v_head_size: int, model_name: str) -> None:
    """Every layer's K/V must have the pool's heads and head sizes (one for all layers)."""
    expected = (num_kv_heads, head_size, v_head_size)
    wrong = [f"layer {layer}: {h} heads x {k}/{v}" for layer, (h, k, v) in sorted(probe.shapes.items())
             if (h, k, v) != expected]
    if wrong:
        raise ConfigError(f"model {model_name}: the layers pass K/V of other heads or head sizes (K/V) to attention "
                          f"than the pool's {num_kv_heads} heads x {head_size}/{v_head_size} (model.num_kv_heads, "
                          f"head_size, v_head_size): {'; '.join(wrong[:4])}{'; ...' if len(wrong) > 4 else ''}")


def check_windows(layers: list[LayerAttention], windows: tuple[int | None, ...], model_name: str) -> None:
    """The model's per-layer windows must be the config's (the geometry the allocators read)."""
    got = tuple(layer.window for layer in layers)
    expected = windows or (None,) * len(layers)
    if got != expected:
        wrong = [f"layer {i}: model {g}, config {e}" for i, (g, e) in enumerate(zip(got, expected)) if g != e]
        raise ConfigError(f"model {model_name}: sliding windows differ from model.sliding_window / "
                          f"model.layer_types ({'; '.join(wrong[:4])}{'; ...' if len(wrong) > 4 else ''})")
