"""The executor's KV tensors for an allocator whose layer groups keep block tables of their own.

A grouped allocator (``allocators.grouped``: ``hybrid``, ``hybrid_static``, ``lcm`` and their
prefix-caching forms) numbers each attention group's blocks on its own (``attention_layout``:
kind, window or chunk size, and how many block ids the group may name). Here each attention
group gets one ``KVPool`` over its own layers, with a block for every id the group may name, so
a group's table indexes its layers' tensors directly. Those tensors together are larger than the
run's KV bytes (a shared page pool lends each id to one group at a time, but every group's
tensor has room for all ids): the metrics count the allocator's bytes, never these tensors.

``step_tables`` turns a step's per-group tables (``StepBatch.group_tables``) into what the
attention of a group's layers reads: the block tables [B, width] and the slot of each new token.
A window group's blocks that left the window are ``-1`` in its table; they are read as block 0,
which the window mask hides (every dropped position lies before the window of the chunk's first
token, so no query of the step attends to it).
"""
from __future__ import annotations

import numpy as np
import torch

from kvbench.config.errors import ConfigError
from kvbench.hf.pool import KVPool


def layer_groups_of(windows: tuple[int | None, ...], num_layers: int, layout: list[tuple]) -> list[int]:
    """The attention group of each layer: the ``window`` group of its size for a sliding layer, the
    ``full`` group for the others; ConfigError when the layout has no such group."""
    groups = []
    for layer in range(num_layers):
        window = windows[layer] if windows else None
        kind = "full" if window is None else "window"
        match = [g for g, (k, size, _) in enumerate(layout) if k == kind and (window is None or size == window)]
        if not match:
            raise ConfigError(f"layer {layer} ({kind}{'' if window is None else f' of {window}'}) has no layer group "
                              f"in the allocator's layout ({', '.join(str(k) for k, _, _ in layout)})")
        groups.append(match[0])
    return groups


def grouped_pool_bytes(layout: list[tuple], layer_group: list[int], block_size: int, layer_token_bytes: int) -> int:
    """Bytes of the per-group tensors (``layer_token_bytes``: one token's K and V in one layer)."""
    return sum(block_ids * block_size * layer_group.count(g) * layer_token_bytes
               for g, (_, _, block_ids) in enumerate(layout))


class GroupedKVPools:
    """One KV pool per attention group of the allocator; ``key_caches[l]`` / ``value_caches[l]``: layer l's."""

    def __init__(self, *, layout: list[tuple], layer_group: list[int], block_size: int, num_kv_heads: int,
                 head_size: int, v_head_size: int, dtype: torch.dtype, device: str | torch.device) -> None:
        self.layout = layout
        self.layer_group = layer_group
        self.block_size = block_size
        self.pools = []
        self.key_caches: list[torch.Tensor] = [None] * len(layer_group)
        self.value_caches: list[torch.Tensor] = [None] * len(layer_group)
        for g, (_, _, block_ids) in enumerate(layout):
            layers = [layer for layer, group in enumerate(layer_group) if group == g]
            pool = KVPool(num_layers=max(1, len(layers)), num_slots=block_ids * block_size, block_size=block_size,
                          num_kv_heads=num_kv_heads, head_size=head_size, v_head_size=v_head_size, dtype=dtype,
                          device=device)
            self.pools.append(pool)
            for i, layer in enumerate(layers):
                self.key_caches[layer] = pool.key_caches[i]
                self.value_caches[layer] = pool.value_caches[i]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pools)

    def step_tables(self, seq_ids: list[int], group_tables: dict[int, list[list[int]]], context: np.ndarray,
                    q_lens: np.ndarray, positions: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per attention group: (block tables [B, width] int32, dropped entries read as 0; slots [T] int64
        of the new tokens at ``positions``, the packed step's, sequence by sequence)."""
        bs = self.block_size
        needed = -(-context // bs)
        width = int(needed.max())
        rows = np.repeat(np.arange(len(seq_ids)), q_lens)
        out = []
        for g in range(len(self.layout)):
            tables = np.zeros((len(seq_ids), width), dtype=np.int64)
            for i, seq_id in enumerate(seq_ids):
                tables[i, :needed[i]] = group_tables[seq_id][g][:needed[i]]
            slots = tables[rows, positions // bs] * bs + positions % bs
            if (tables[rows, positions // bs] < 0).any():
                raise RuntimeError(f"layer group {g}: a new token's block was dropped from its table")
            out.append((np.maximum(tables, 0).astype(np.int32), slots))
        return out
