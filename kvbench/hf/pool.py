"""The executor's KV pool: one device tensor for every layer's K and V, and a host pool for swaps.

Layout: ``data`` is [num_layers, 2, num_blocks, block_size, num_kv_heads, head_size]; layer l's key
cache is ``data[l, 0]`` and its value cache ``data[l, 1]``, each the kernels' per-layer layout
[num_blocks, block_size, num_kv_heads, head_size] (slot = block * block_size + offset). When V's
head size differs from K's (MLA, ``v_head_size``), K and V live in two tensors instead,
[num_layers, num_blocks, block_size, num_kv_heads, head_size or v_head_size], and ``data`` is None:
the pool holds MLA's K and V expanded per head, as the attention call receives them (not the
compressed latent, which transformers expands before attention). The host pool maps a swapped
sequence's key to its K/V in token order from position 0, one CPU tensor per pool tensor.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from kernels.pool import plan_copies
from kvbench.batch import SwapOp


class KVPool:
    def __init__(self, *, num_layers: int, num_slots: int, block_size: int, num_kv_heads: int, head_size: int,
                 dtype: torch.dtype, device: str | torch.device, v_head_size: int | None = None) -> None:
        if num_slots % block_size:
            raise ValueError(f"num_slots ({num_slots}) must be a multiple of block_size ({block_size})")
        self.num_layers = num_layers
        self.num_slots = num_slots
        self.block_size = block_size
        self.device = torch.device(device)
        blocks = (num_slots // block_size, block_size, num_kv_heads)
        self.data: torch.Tensor | None = None
        if v_head_size in (None, head_size):
            self.data = torch.zeros((num_layers, 2, *blocks, head_size), dtype=dtype, device=self.device)
            self.key_caches = [self.data[layer, 0] for layer in range(num_layers)]
            self.value_caches = [self.data[layer, 1] for layer in range(num_layers)]
            # (tensor viewed slot-major, its slot dimension): what a swap moves
            self._parts = [(self.data.view(num_layers, 2, num_slots, num_kv_heads, head_size), 2)]
        else:
            keys = torch.zeros((num_layers, *blocks, head_size), dtype=dtype, device=self.device)
            values = torch.zeros((num_layers, *blocks, v_head_size), dtype=dtype, device=self.device)
            self.key_caches, self.value_caches = list(keys), list(values)
            self._parts = [(t.view(num_layers, num_slots, num_kv_heads, t.shape[-1]), 1) for t in (keys, values)]
        self.host: dict[int, list[torch.Tensor]] = {}

    @property
    def slot_parts(self) -> list[tuple[torch.Tensor, int]]:
        """Each pool tensor viewed slot-major and its slot dimension (what swaps and the host tier move)."""
        return self._parts

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t, _ in self._parts)

    def copy(self, ops: Iterable, copy_slots: Callable) -> int:
        """Apply the allocator's CopyOps in order with the kernel ``copy_slots``; returns slots copied."""
        copied = 0
        for src, dst in plan_copies(ops, self.device):
            for key_cache, value_cache in zip(self.key_caches, self.value_caches):
                copy_slots(key_cache, value_cache, src, dst)
            copied += src.numel()
        return copied

    def swap_out(self, op: SwapOp) -> None:
        """Device slots -> host pool under ``op.key``; the tokens are those at positions 0.. of the sequence."""
        if op.offset:
            raise ValueError(f"swap-out of seq {op.key} must start at position 0, got offset {op.offset}")
        slots = torch.as_tensor(op.slots, dtype=torch.int64, device=self.device)
        self.host[op.key] = [t.index_select(dim, slots).to("cpu") for t, dim in self._parts]

    def swap_in(self, op: SwapOp) -> None:
        """Host pool -> device slots; ``op.slots[0]`` holds position ``op.offset`` (earlier positions were
        prefix-cached). The host copy is released."""
        held = self.host.pop(op.key)
        stop = op.offset + len(op.slots)
        tokens = held[0].shape[self._parts[0][1]]
        if stop > tokens:
            raise ValueError(f"swap-in of seq {op.key} asks positions [{op.offset}, {stop}) of {tokens} held")
        slots = torch.as_tensor(op.slots, dtype=torch.int64, device=self.device)
        for (tensor, dim), saved in zip(self._parts, held):
            tensor.index_copy_(dim, slots, saved.narrow(dim, op.offset, len(op.slots)).to(self.device,
                                                                                         non_blocking=True))
