"""Layer groups of a heterogeneous model: which layers keep which kind of KV, and its bytes.

A group is every layer of one kind and one shape:

- ``full``: attends to the whole sequence (bytes per token);
- ``window``: sliding window of ``size`` tokens, the query itself included (bytes per token);
- ``chunked``: local attention within chunks of ``size`` tokens (Llama 4; bytes per token);
- ``state``: Mamba, linear attention or short convolution: a fixed state per request
  (``state_bytes``, all the group's layers together), no per-token KV.

The model config names each layer's kind in ``layer_types`` (transformers' names:
``full_attention`` / ``attention``, ``sliding_attention``, ``chunked_attention``, and
``linear_attention`` / ``mamba`` / ``conv`` for state layers; ``hybrid`` (Falcon-H1) is a layer
with both a full-attention and a state part). Windows come from ``sliding_window``, chunks from
``attention_chunk_size``, state sizes from ``state_bytes_per_layer`` (bytes per request and
layer; ``state_bytes_from_hf`` computes it from a transformers config). Full layers may differ in
shape from the others (Gemma 4): ``full_num_kv_heads`` / ``full_head_size`` override theirs.

A model without ``layer_types`` and without ``sliding_window`` is uniform: one ``full`` group.
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # bytes of one element, by dtype name

KINDS = ("full", "window", "chunked", "state")
FULL_TYPES = ("full_attention", "attention")
STATE_TYPES = ("linear_attention", "mamba", "conv")
LAYER_TYPES = FULL_TYPES + ("sliding_attention", "chunked_attention", "hybrid") + STATE_TYPES


@dataclass(frozen=True, slots=True)
class LayerGroup:
    kind: str  # one of KINDS
    size: int | None  # window or chunk in tokens; None for full and state
    num_layers: int
    token_bytes: int  # K and V of one token over the group's layers; 0 for state
    state_bytes: int = 0  # per request over the group's layers; state groups only

    @property
    def is_attention(self) -> bool:
        return self.kind != "state"

    def spec(self) -> tuple[str, int | None, int, int]:
        """The allocator's view (pure Python): (kind, size, token_bytes, state_bytes)."""
        return (self.kind, self.size, self.token_bytes, self.state_bytes)


def _field(model, key: str):
    return model.get(key) if hasattr(model, "get") else getattr(model, key, None)


def _positive(model, key: str) -> int:
    value = _field(model, key)
    if value is None or isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"model.{key} must be an integer >= 1, got {value!r}")
    return int(value)


def layer_groups(model) -> tuple[LayerGroup, ...]:
    """The model config's layer groups, attention groups first (full, window, chunked), then state;
    ValueError (naming the setting) on a wrong ``layer_types`` or size."""
    layers = int(_field(model, "num_layers"))
    types = _field(model, "layer_types")
    if types is None:
        types = ["sliding_attention" if _field(model, "sliding_window") is not None else "full_attention"] * layers
    types = [str(t) for t in types]
    if len(types) != layers or not set(types) <= set(LAYER_TYPES):
        raise ValueError(f"model.layer_types must list {layers} entries of {', '.join(LAYER_TYPES)}; "
                         f"got {len(types)} entries of {', '.join(sorted(set(types)))}")
    dtype = DTYPE_BYTES[str(_field(model, "dtype"))]
    per_layer = 2 * int(_field(model, "num_kv_heads")) * int(_field(model, "head_size")) * dtype
    full_heads = _field(model, "full_num_kv_heads") or _field(model, "num_kv_heads")
    full_per_layer = 2 * int(full_heads) * int(_field(model, "full_head_size") or _field(model, "head_size")) * dtype
    counts = {kind: 0 for kind in KINDS}
    for t in types:
        if t in FULL_TYPES or t == "hybrid":
            counts["full"] += 1
        if t == "sliding_attention":
            counts["window"] += 1
        if t == "chunked_attention":
            counts["chunked"] += 1
        if t in STATE_TYPES or t == "hybrid":
            counts["state"] += 1
    max_len = _field(model, "max_model_len")  # absent from a bare geometry config: no window check
    max_len = int(max_len) if max_len is not None else None
    groups = []
    if counts["full"]:
        groups.append(LayerGroup("full", None, counts["full"], counts["full"] * full_per_layer))
    for kind, key in (("window", "sliding_window"), ("chunked", "attention_chunk_size")):
        if counts[kind]:
            size = _positive(model, key)
            if max_len is not None and size > max_len:
                raise ValueError(f"model.{key}={size} is larger than the model's context "
                                 f"(model.max_model_len={max_len})")
            groups.append(LayerGroup(kind, size, counts[kind], counts[kind] * per_layer))
    if counts["state"]:
        state = _positive(model, "state_bytes_per_layer")
        groups.append(LayerGroup("state", None, counts["state"], 0, counts["state"] * state))
    return tuple(groups)


def is_uniform(groups: tuple[LayerGroup, ...]) -> bool:
    """One full-attention group: every layer holds every token (classic paging applies as is)."""
    return len(groups) == 1 and groups[0].kind == "full"


# -- transformers configs (read on CPU, nothing fetched) -------------------------------------------
def hf_layer_types(config) -> list[str]:
    """kvbench ``layer_types`` of a transformers config: its ``layer_types`` where it has them,
    else its block pattern (Jamba's ``layers_block_type``, Bamba's ``attn_layer_indices``,
    Nemotron-H's ``hybrid_override_pattern``), keeping only layers that hold KV or state."""
    types = getattr(config, "layer_types", None)
    if types is None:
        types = getattr(config, "layers_block_type", None)
    if types is None:
        raise ValueError(f"{type(config).__name__} names no layer types")
    kept = [str(t) for t in types if str(t) not in ("mlp", "moe")]  # Nemotron-H lists its MLP blocks too
    unknown = sorted(set(kept) - set(LAYER_TYPES))
    if unknown:
        raise ValueError(f"{type(config).__name__}: unknown layer types {unknown}")
    return kept


def state_bytes_from_hf(config, dtype_bytes: int) -> int:
    """Bytes of one state layer's per-request state (convolution window plus recurrent state), as
    vLLM sizes it: the element counts of ``MambaStateShapeCalculator``'s shapes
    (vllm/model_executor/layers/mamba/mamba_utils.py) at one GPU and no speculative tokens, with
    the arguments each model's ``get_mamba_state_shape_from_config`` passes (vllm/model_executor/
    models/<family>.py), in the model's dtype (vLLM's default state dtype, ``auto``). Every
    convolution keeps ``kernel - 1`` past inputs per channel.

    Mamba-2 (Bamba, Falcon-H1, Granite-4.0-H, Nemotron-H; ``mamba2_state_shape``): conv over
    ``inner + 2 * groups * d_state`` channels, SSM ``heads * head_dim * d_state``.
    Mamba-1 (Jamba; ``mamba1_state_shape``): conv ``expand * hidden`` channels, SSM
    ``expand * hidden * d_state``. Gated DeltaNet (Qwen3-Next; ``gated_delta_net_state_shape``):
    conv over ``2 * k_heads * k_dim + v_heads * v_dim`` channels, recurrent ``v_heads * v_dim *
    k_dim``. LFM2 short convolution (``short_conv_state_shape``): conv ``conv_dim`` channels.
    """
    c = config
    if hasattr(c, "linear_num_value_heads"):
        k_dim, v_dim = c.linear_key_head_dim, c.linear_value_head_dim
        conv = (2 * c.linear_num_key_heads * k_dim + c.linear_num_value_heads * v_dim) * (c.linear_conv_kernel_dim - 1)
        return (conv + c.linear_num_value_heads * v_dim * k_dim) * dtype_bytes
    if hasattr(c, "conv_L_cache"):
        # lfm2.py passes conv_dim (its published configs set it to hidden_size), lfm2_moe.py hidden_size
        channels = getattr(c, "conv_dim", None) or c.hidden_size
        return channels * (c.conv_L_cache - 1) * dtype_bytes
    heads = getattr(c, "mamba_n_heads", None) or getattr(c, "mamba_num_heads", None)
    if heads is not None:
        head_dim = getattr(c, "mamba_d_head", None) or getattr(c, "mamba_head_dim", None)
        if head_dim == "auto" or head_dim is None:
            head_dim = c.mamba_d_ssm // heads
        d_state = getattr(c, "mamba_d_state", None) or getattr(c, "ssm_state_size")
        d_conv = getattr(c, "mamba_d_conv", None) or getattr(c, "conv_kernel")
        groups = getattr(c, "mamba_n_groups", None) or getattr(c, "n_groups", 1)
        inner = _mamba2_inner(c, heads * head_dim)
        return ((inner + 2 * groups * d_state) * (d_conv - 1) + heads * head_dim * d_state) * dtype_bytes
    inner = c.mamba_expand * c.hidden_size
    return (inner * (c.mamba_d_conv - 1) + inner * c.mamba_d_state) * dtype_bytes


def _mamba2_inner(c, heads_dim: int) -> int:
    """The ``intermediate_size`` vLLM gives a Mamba-2 mixer's convolution: ``mamba_d_ssm``, else
    ``mamba_expand * hidden`` (falcon_h1.py, granitemoehybrid.py; bamba.py before its removal),
    else heads * head_dim (nemotron_h.py). The published models set all three alike."""
    d_ssm = getattr(c, "mamba_d_ssm", None)
    if d_ssm is not None:
        return d_ssm
    expand = getattr(c, "mamba_expand", None)
    return int(expand * c.hidden_size) if expand is not None else heads_dim


def hf_model_fields(config, dtype: str = "bfloat16") -> dict:
    """The kvbench model fields that set a transformers config's layer groups. Per-layer shapes
    (Gemma 4's ``per_layer_config``: its global layers' own head size and KV heads) become
    ``full_head_size`` / ``full_num_kv_heads``."""
    d = config.to_dict()
    types = hf_layer_types(config)
    head = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
    fields = {
        "num_layers": len(types), "layer_types": types, "dtype": dtype, "max_model_len": 1 << 30,
        "num_kv_heads": d["num_key_value_heads"], "head_size": head,
        "sliding_window": d.get("sliding_window"), "attention_chunk_size": d.get("attention_chunk_size"),
    }
    for index, override in (d.get("per_layer_config") or {}).items():
        if types[int(index)] in FULL_TYPES:
            fields["full_head_size"] = override.get("head_dim", fields.get("full_head_size"))
            fields["full_num_kv_heads"] = override.get("num_key_value_heads", fields.get("full_num_kv_heads"))
    if set(types) & (set(STATE_TYPES) | {"hybrid"}):
        fields["state_bytes_per_layer"] = state_bytes_from_hf(config, DTYPE_BYTES[dtype])
    return fields
