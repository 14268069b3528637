"""Frozen model geometry: every byte count in the metrics derives from here.

``windows`` holds each layer's sliding window (tokens a query attends to, itself included; None =
full attention), from the model config's ``sliding_window`` and ``layer_types`` (a list of
``sliding_attention`` / ``full_attention``, as transformers names them; absent: every layer slides
when ``sliding_window`` is set). Empty means every layer attends to the whole sequence. The hf
executor checks at start that the model's layers use exactly these windows; allocators may read
them (no torch needed) to free blocks that left every layer's window.

Multi-head latent attention (DeepSeek-V2/V3, MiniCPM3; model config ``kv_lora_rank`` and
``qk_rope_head_dim``) caches, per token and layer, one compressed latent of ``kv_lora_rank``
values plus one shared rope key of ``qk_rope_head_dim``, for all heads together: ``latent_size``
is their sum and ``bytes_per_slot`` counts that (what an MLA server stores; the sim sizes pools
with it). ``head_size`` / ``v_head_size`` are the per-head K (qk_nope + qk_rope) and V sizes the
attention call receives once transformers has expanded the latent; ``pool_bytes_per_slot`` counts
those, which is what the hf pool holds. For every other model both byte counts are the classic
``2 * layers * kv_heads * head_size * dtype_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvbench.layer_groups import DTYPE_BYTES, layer_groups


@dataclass(frozen=True, slots=True)
class KVGeometry:
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype: str = "float16"
    windows: tuple[int | None, ...] = ()  # per layer sliding window; () = full attention everywhere
    v_head_size: int | None = None  # V's head size when it differs from K's (MLA); None = head_size
    latent_size: int | None = None  # MLA: kv_lora_rank + qk_rope_head_dim cached per layer; None = not MLA
    groups: tuple = ()  # kvbench.layer_groups.LayerGroup of a mixed model; () = uniform (one full group)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.windows and len(self.windows) != self.num_layers:
            raise ValueError(f"windows has {len(self.windows)} entries for {self.num_layers} layers")

    def window_of(self, layer: int) -> int | None:
        """Sliding window of ``layer`` (None: full attention)."""
        return self.windows[layer] if self.windows else None

    @property
    def max_window(self) -> int | None:
        """Tokens behind the newest one that some layer still reads; None when a layer is full."""
        if not self.windows or any(w is None for w in self.windows):
            return None
        return max(self.windows)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def value_head_size(self) -> int:
        return self.head_size if self.v_head_size is None else self.v_head_size

    @property
    def bytes_per_slot(self) -> int:
        """The KV cache of one token, all layers: K and V per KV head, or MLA's latent and rope key."""
        if self.latent_size is not None:
            return self.num_layers * self.latent_size * self.dtype_bytes
        if self.groups:  # a mixed model: the attention groups' per-token bytes (state layers hold none)
            return sum(g.token_bytes for g in self.groups)
        return self.pool_bytes_per_slot

    @property
    def pool_bytes_per_slot(self) -> int:
        """K and V of one token per KV head, all layers: what the hf executor's pool stores."""
        return self.num_layers * self.num_kv_heads * (self.head_size + self.value_head_size) * self.dtype_bytes

    def slots_for(self, kv_bytes: float) -> int:
        return int(kv_bytes // self.bytes_per_slot)

    @classmethod
    def from_model_cfg(cls, model) -> "KVGeometry":
        v_head_size = _field(model, "v_head_size")
        rank, rope = _field(model, "kv_lora_rank"), _field(model, "qk_rope_head_dim")
        if (rank is None) != (rope is None):
            raise ValueError("model.kv_lora_rank and model.qk_rope_head_dim (MLA) are set together or not at all")
        return cls(int(model.num_layers), int(model.num_kv_heads), int(model.head_size), str(model.dtype),
                   layer_windows(model), None if v_head_size is None else int(v_head_size),
                   None if rank is None else int(rank) + int(rope), _mixed_groups(model))


def _field(model, key: str):
    return model.get(key) if hasattr(model, "get") else getattr(model, key, None)


def _mixed_groups(model) -> tuple:
    """The layer groups of a mixed model; () for a uniform one or one whose layers all slide alike
    (those keep their classic geometry, so their results stay as they were)."""
    groups = layer_groups(model)
    if len(groups) == 1 and groups[0].kind in ("full", "window"):
        return ()
    return groups


def layer_windows(model) -> tuple[int | None, ...]:
    """Per-layer sliding windows of a model config (see the module docstring); () when none slides."""
    window = _field(model, "sliding_window")
    if window is None:
        return ()
    if isinstance(window, bool) or int(window) != window or int(window) < 1:
        raise ValueError(f"model.sliding_window must be null or an integer >= 1, got {window!r}")
    layers = int(model.num_layers)
    types = _field(model, "layer_types")
    if types is None:
        return (int(window),) * layers
    types = list(types)
    allowed = {"sliding_attention", "full_attention"}
    if not set(types) <= allowed:  # chunked or state layers too: kvbench.layer_groups checks them
        layer_groups(model)
        return tuple(int(window) if t == "sliding_attention" else None for t in types)
    if len(types) != layers or not set(types) <= allowed:
        raise ValueError(f"model.layer_types must list {layers} entries of {sorted(allowed)}, got {types}")
    return tuple(int(window) if t == "sliding_attention" else None for t in types)
