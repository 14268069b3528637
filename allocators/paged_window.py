"""Window-aware paging for sliding-window models (the sliding part of vLLM's hybrid allocator).

Paged allocation as in ``allocators.paged``, plus a ``window`` (tokens a query attends to,
itself included, for EVERY layer): a block whose every position lies before the window of the
first token a grow writes is read by no later step, so the grow drops it from the sequence's
block table and releases its reference (a block still shared with a fork stays until its last
owner drops it or frees). Only models whose layers all slide qualify; models that alternate
full and sliding layers (per-layer-group tables) are not handled here.

The block table keeps its length so position arithmetic stays valid: a dropped entry is
``DROPPED`` (-1), and dropped entries always form a prefix of the table. Readers must skip
positions older than ``window`` tokens before the token they compute.

Breakdown: a released block is free (external). The sequence's ``reserved`` slots are those of
its tail blocks only (blocks are taken on demand), so a windowed sequence never holds more than
``window + 2 * block_size`` slots live once past its prompt. ``stats()`` adds
``window_freed_slots``: slots returned to the pool by the window so far (cumulative).
"""
from __future__ import annotations

from collections.abc import Sequence

from allocators.base import AllocatorError, ceil_div, check_length
from allocators.paged import PagedAllocator, _PagedSeq

DROPPED = -1  # block-table entry of a block released because it left the window


class PagedWindowAllocator(PagedAllocator):
    """Paged blocks, released once they leave the sliding window of every layer."""

    name = "paged_window"

    def __init__(self, num_slots: int, block_size: int = 16, window: int | None = None, debug: bool = False) -> None:
        if window is None:
            raise AllocatorError("paged_window needs window (tokens), the sliding window of every layer")
        self.window = check_length("window", window, 1)
        super().__init__(num_slots, block_size, debug)
        self._dropped: dict[int, int] = {}  # seq -> leading table entries that are DROPPED
        self._window_freed_blocks = 0

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        first = seq.num_tokens if seq is not None else 0
        slots = super().grow(seq_id, num_tokens, token_ids)
        if slots and first + 1 > self.window:
            self._drop_before(seq_id, seq, first + 1 - self.window)
            if self.debug:
                self.check_invariants()
        return slots

    def _drop_before(self, seq_id: int, seq: _PagedSeq, oldest_read: int) -> None:
        """Release the blocks wholly before position ``oldest_read``."""
        stop = oldest_read >> self._shift
        start = self._dropped.get(seq_id, 0)
        if stop <= start:
            return
        table, ref = seq.table, self._ref
        released = []
        for index in range(start, stop):
            block = table[index]
            table[index] = DROPPED
            ref[block] -= 1
            if not ref[block]:
                released.append(block)
        self._dropped[seq_id] = stop
        self._window_freed_blocks += len(released)
        self._release_blocks(released[::-1])

    def _held(self, seq_id: int, seq: _PagedSeq) -> list[int]:
        dropped = self._dropped.get(seq_id, 0)
        return seq.table[dropped:] if dropped else seq.table

    def _forked(self, parent_id: int, child_id: int) -> None:
        self._dropped[child_id] = self._dropped.get(parent_id, 0)

    def _freed(self, seq_id: int) -> None:
        self._dropped.pop(seq_id, None)

    def block_counts(self) -> tuple[int, int] | None:
        """Dropped (``DROPPED``) table entries hold no block and are not counted."""
        per_sequence, distinct = super().block_counts()
        return per_sequence - sum(self._dropped.values()), distinct

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        out["window_freed_slots"] = self._window_freed_blocks * self.block_size
        return out

    def check_invariants(self) -> None:
        bs = self.block_size
        counts = [0] * self.num_blocks
        filled_by: dict[int, int] = {}
        for seq_id, seq in self._seqs.items():
            assert 0 <= seq.num_tokens <= seq.max_len, f"seq {seq_id}: {seq.num_tokens} tokens, max_len {seq.max_len}"
            want = ceil_div(max(seq.num_tokens, seq.prompt_len), bs)
            assert len(seq.table) == want, f"seq {seq_id}: {len(seq.table)} blocks, expected {want}"
            dropped = self._dropped.get(seq_id, 0)
            assert seq.table[:dropped] == [DROPPED] * dropped, f"seq {seq_id}: dropped entries not a prefix"
            assert dropped * bs <= max(0, seq.num_tokens - self.window), f"seq {seq_id}: dropped a block inside the window"
            live = seq.table[dropped:]
            assert len(set(live)) == len(live), f"seq {seq_id}: a block twice in its table"
            for index, b in enumerate(seq.table[dropped:], start=dropped):
                assert 0 <= b < self.num_blocks, f"seq {seq_id}: block {b} out of range"
                counts[b] += 1
                filled = min(max(seq.num_tokens - index * bs, 0), bs)
                if filled_by.setdefault(b, filled) != filled:
                    raise AssertionError(f"shared block {b} not frozen: owners computed {filled_by[b]} and {filled} slots")
        assert set(self._dropped) <= set(self._seqs), "dropped counts of a sequence that is not live"
        free = self._free_block_ids()
        assert len(set(free)) == len(free), "a block is twice in the free list"
        free_set = set(free)
        for b in range(self.num_blocks):
            assert self._ref[b] == counts[b], f"block {b}: ref {self._ref[b]} but {counts[b]} table entries"
            assert (b in free_set) == (counts[b] == 0), f"block {b}: ref {counts[b]}, in free list: {b in free_set}"
        assert len(free) + sum(1 for c in counts if c) == self.num_blocks, "free + used != num_blocks"
