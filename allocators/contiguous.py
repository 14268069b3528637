"""Contiguous allocation: one slot range per sequence, first-fit over free holes.

The free space is a list of holes ``(start_block, nblocks)`` sorted by start, pairwise
disjoint and never adjacent (a freed region coalesces with the holes on either side), so
external fragmentation is real: a request fails when no single hole is large enough, however
much free space there is in total. A region is carved from the front of the lowest-addressed
hole that fits (first-fit). Reserve policies and growth are in ``allocators.region``.
"""
from __future__ import annotations

from bisect import bisect_left

from allocators.region import RegionAllocator


class ContiguousAllocator(RegionAllocator):
    """First-fit contiguous regions of whole blocks; ``reserve`` in max, pow2, pow2-total, oracle, double.

    Invariants: ``_hole_starts`` is strictly increasing; hole ``i`` covers blocks
    ``[_hole_starts[i], _hole_starts[i] + _hole_lens[i])`` with length >= 1 and ends strictly
    before hole ``i + 1`` starts (coalesced); holes and live regions tile the pool's blocks.
    """

    name = "contiguous"

    def __init__(
        self,
        num_slots: int,
        block_size: int = 16,
        reserve: str = "max",
        max_model_len: int = 2048,
        double_chunk: int = 16,
        debug: bool = False,
    ) -> None:
        super().__init__(num_slots, block_size, reserve, max_model_len, double_chunk, debug)
        self._hole_starts: list[int] = [0]
        self._hole_lens: list[int] = [self.num_blocks]
        self._free_blocks = self.num_blocks
        self._max_region_blocks = self.num_blocks
        self._usable_blocks = self.num_blocks

    def _round_blocks(self, nblocks: int) -> int:
        return nblocks

    def _has_region(self, nblocks: int) -> bool:
        return any(length >= nblocks for length in self._hole_lens)

    def _take_region(self, nblocks: int) -> int | None:
        lens = self._hole_lens
        for i, length in enumerate(lens):
            if length >= nblocks:
                start = self._hole_starts[i]
                if length == nblocks:
                    del self._hole_starts[i], lens[i]
                else:
                    self._hole_starts[i] = start + nblocks
                    lens[i] = length - nblocks
                self._free_blocks -= nblocks
                return start
        return None

    def _give_region(self, start_block: int, nblocks: int) -> None:
        starts, lens = self._hole_starts, self._hole_lens
        i = bisect_left(starts, start_block)
        end = start_block + nblocks
        merge_prev = i > 0 and starts[i - 1] + lens[i - 1] == start_block
        merge_next = i < len(starts) and starts[i] == end
        if merge_prev and merge_next:
            lens[i - 1] += nblocks + lens[i]
            del starts[i], lens[i]
        elif merge_prev:
            lens[i - 1] += nblocks
        elif merge_next:
            starts[i] = start_block
            lens[i] += nblocks
        else:
            starts.insert(i, start_block)
            lens.insert(i, nblocks)
        self._free_blocks += nblocks

    def _free_block_count(self) -> int:
        return self._free_blocks

    def holes(self) -> list[tuple[int, int]]:
        """Free holes as (start_block, nblocks), by address."""
        return list(zip(self._hole_starts, self._hole_lens))

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        out["holes"] = len(self._hole_starts)
        out["largest_hole_slots"] = max(self._hole_lens, default=0) * self.block_size
        return out

    def _check_free_space(self, owner: list[int | None]) -> None:
        starts, lens = self._hole_starts, self._hole_lens
        assert len(starts) == len(lens), "hole lists differ in length"
        prev_end = -1
        total = 0
        for start, length in zip(starts, lens):
            assert length >= 1, f"empty hole at block {start}"
            assert start > prev_end, f"hole at block {start} not sorted, disjoint, coalesced (previous ends at {prev_end})"
            for b in range(start, start + length):
                assert owner[b] is None, f"block {b} is in a hole and owned by seq {owner[b]}"
            prev_end = start + length
            total += length
        assert prev_end <= self.num_blocks, "hole past the end of the pool"
        assert total == self._free_blocks, f"free counter {self._free_blocks} != holes {total}"
        assert total + sum(o is not None for o in owner) == self.num_blocks, "holes and regions do not tile the pool"
