"""The hf executor's host tier: real K/V of the offload host tier's chunks in host memory.

One tensor per pool tensor, shaped like the device pool viewed slot-major with ``num_chunks x
chunk_slots`` slots, allocated once (pinned when CUDA is present, so copies to and from the GPU
can run asynchronously); chunk keys map to chunk places from a free list. The books (which chunk
is held, which goes) are ``allocators.tiers.TierStack``'s; this pool only follows its
``TierCopy`` list: ``store`` copies a chunk's GPU blocks in, ``load`` copies a chunk's blocks
(from ``offset``) out into fresh GPU blocks, ``drop`` frees a place.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from allocators.tiers import TierCopy
from kvbench.hf.pool import KVPool


class HostTierPool:
    def __init__(self, pool: KVPool, num_chunks: int, chunk_blocks: int) -> None:
        if num_chunks < 1:
            raise ValueError(f"the host tier holds no chunk ({num_chunks})")
        self.pool = pool
        self.chunk_blocks = chunk_blocks
        self.chunk_slots = chunk_blocks * pool.block_size
        pin = torch.cuda.is_available()
        self.data = []
        for tensor, dim in pool.slot_parts:
            shape = list(tensor.shape)
            shape[dim] = num_chunks * self.chunk_slots
            self.data.append(torch.zeros(shape, dtype=tensor.dtype, device="cpu", pin_memory=pin))
        self.place: dict[int, int] = {}  # chunk key -> chunk place
        self.free = list(range(num_chunks - 1, -1, -1))
        self._staged: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # loads read, not yet written
        self.stored = self.loaded = 0  # chunks copied in, blocks copied out

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.data)

    def apply(self, copies: Sequence[TierCopy], phase: str) -> None:
        """``phase="before"``: every copy in the order the books made them, before the step writes a
        block: stores copy GPU blocks in, drops free places, loads read their chunk out (staged, so a
        later drop or store in the same list cannot change it); ``"after"``: the staged loads are
        written into their GPU blocks, once swap-outs, copies and swap-ins are done."""
        if phase == "before":
            self._staged = []
            for c in copies:
                if c.kind == "store":
                    self._store(c.key, c.blocks)
                elif c.kind == "drop":
                    self.free.append(self.place.pop(c.key))
                else:
                    self._stage(c.key, c.blocks, c.offset)
        else:
            for slots, parts in self._staged:
                for (tensor, dim), saved in zip(self.pool.slot_parts, parts):
                    tensor.index_copy_(dim, slots, saved.to(self.pool.device, non_blocking=True))
            self._staged = []

    def _slots(self, blocks: Sequence[int]) -> torch.Tensor:
        bs = self.pool.block_size
        base = torch.as_tensor(list(blocks), dtype=torch.int64) * bs
        return (base[:, None] + torch.arange(bs)).reshape(-1).to(self.pool.device)

    def _store(self, key: int, blocks: Sequence[int]) -> None:
        if len(blocks) != self.chunk_blocks:
            raise ValueError(f"store of chunk {key}: {len(blocks)} blocks, a chunk has {self.chunk_blocks}")
        if key in self.place:
            raise ValueError(f"store of chunk {key}: already held")
        place = self.free.pop()
        self.place[key] = place
        slots = self._slots(blocks)
        for (tensor, dim), host in zip(self.pool.slot_parts, self.data):
            host.narrow(dim, place * self.chunk_slots, self.chunk_slots).copy_(tensor.index_select(dim, slots))
        self.stored += 1

    def _stage(self, key: int, blocks: Sequence[int], offset: int) -> None:
        place = self.place[key]
        slots = self._slots(blocks)
        start = place * self.chunk_slots + offset * self.pool.block_size
        self._staged.append((slots, [host.narrow(dim, start, len(slots)).clone()
                                     for (_, dim), host in zip(self.pool.slot_parts, self.data)]))
        self.loaded += len(blocks)
