"""Frozen model geometry: every byte count in the metrics derives from here.

``windows`` holds each layer's sliding window (tokens a query attends to, itself included; None =
full attention), from the model config's ``sliding_window`` and ``layer_types`` (a list of
``sliding_attention`` / ``full_attention``, as transformers names them; absent: every layer slides
when ``sliding_window`` is set). Empty means every layer attends to the whole sequence. The hf
executor checks at start that the model's layers use exactly these windows; allocators may read
them (no torch needed) to free blocks that left every layer's window.
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class KVGeometry:
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype: str = "float16"
    windows: tuple[int | None, ...] = ()  # per layer sliding window; () = full attention everywhere

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
    def bytes_per_slot(self) -> int:
        """K and V of one token, all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_size * self.dtype_bytes

    def slots_for(self, kv_bytes: float) -> int:
        return int(kv_bytes // self.bytes_per_slot)

    @classmethod
    def from_model_cfg(cls, model) -> "KVGeometry":
        return cls(int(model.num_layers), int(model.num_kv_heads), int(model.head_size), str(model.dtype),
                   layer_windows(model))


def _field(model, key: str):
    return model.get(key) if hasattr(model, "get") else getattr(model, key, None)


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
    if len(types) != layers or not set(types) <= allowed:
        raise ValueError(f"model.layer_types must list {layers} entries of {sorted(allowed)}, got {types}")
    return tuple(int(window) if t == "sliding_attention" else None for t in types)
