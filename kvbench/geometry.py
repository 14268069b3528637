"""Frozen model geometry: every byte count in the metrics derives from here."""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class KVGeometry:
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype: str = "float16"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")

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
        return cls(int(model.num_layers), int(model.num_kv_heads), int(model.head_size), str(model.dtype))
