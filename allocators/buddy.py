"""Binary buddy allocation over the slot array, in units of ``block_size`` slots.

Arenas: the pool's ``num_blocks = num_slots // block_size`` blocks are cut into top-level
arenas by the binary expansion of ``num_blocks``, largest first at the lowest address (e.g.
13 blocks -> arenas of 8, 4 and 1 blocks at blocks 0, 8 and 12). Each arena starts at a
multiple of its own size, so a block of order k at address a (a multiple of 2**k) has its
buddy at ``a ^ 2**k``; buddies merge only up to their arena's order, never across arenas.
Arenas smaller than ``2**min_order`` blocks are never used (they count as external), as are
the ``num_slots % block_size`` tail slots.

Regions are ``2**k`` blocks with ``k >= min_order``. Allocation takes the lowest-addressed
free block of the smallest sufficient order and splits it, keeping the low half and freeing
the high half at each level. Freeing merges with the buddy while the buddy is free at the
same order. Reserve policies and growth (double moves to a region of the next order) are in
``allocators.region``.

Invariants: ``_free[k]`` is a sorted list of distinct free block addresses of order k, each
a multiple of 2**k inside an arena of order >= k; no free block's buddy (within its arena) is
free at the same order (fully coalesced); free blocks and live regions tile the usable arenas.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from allocators.base import AllocatorError, check_length, next_pow2
from allocators.region import RegionAllocator


class BuddyAllocator(RegionAllocator):
    """Binary buddy system; ``reserve`` in max, pow2, pow2-total, oracle, double; ``min_order`` >= 0."""

    name = "buddy"

    def __init__(
        self,
        num_slots: int,
        block_size: int = 16,
        reserve: str = "max",
        max_model_len: int = 2048,
        min_order: int = 0,
        double_chunk: int = 16,
        debug: bool = False,
    ) -> None:
        super().__init__(num_slots, block_size, reserve, max_model_len, double_chunk, debug)
        self.min_order = check_length("min_order", min_order)
        # arenas as (first block, order), largest first
        self.arenas: list[tuple[int, int]] = []
        base = 0
        for order in range(self.num_blocks.bit_length() - 1, -1, -1):
            if self.num_blocks >> order & 1:
                self.arenas.append((base, order))
                base += 1 << order
        usable = [(b, k) for b, k in self.arenas if k >= self.min_order]
        if not usable:
            raise AllocatorError(
                f"min_order={min_order} needs arenas of {1 << self.min_order} blocks; "
                f"the pool holds only {self.num_blocks} blocks of {block_size} slots"
            )
        self.max_order = usable[0][1]
        self._free: list[list[int]] = [[] for _ in range(self.max_order + 1)]
        for b, k in usable:
            self._free[k].append(b)
        self._usable_blocks = sum(1 << k for _, k in usable)
        self._free_blocks = self._usable_blocks
        self._max_region_blocks = 1 << self.max_order

    def _round_blocks(self, nblocks: int) -> int:
        return next_pow2(max(nblocks, 1 << self.min_order))

    def _arena_order(self, block: int) -> int:
        for base, order in self.arenas:
            if block < base + (1 << order):
                return order
        raise AssertionError(f"block {block} is outside every arena")

    def _has_region(self, nblocks: int) -> bool:
        free = self._free
        return any(free[j] for j in range(nblocks.bit_length() - 1, self.max_order + 1))

    def _take_region(self, nblocks: int) -> int | None:
        order = nblocks.bit_length() - 1
        free = self._free
        j = order
        while j <= self.max_order and not free[j]:
            j += 1
        if j > self.max_order:
            return None
        block = free[j].pop(0)
        while j > order:  # split: keep the low half, free the high half
            j -= 1
            insort(free[j], block + (1 << j))
        self._free_blocks -= nblocks
        return block

    def _give_region(self, start_block: int, nblocks: int) -> None:
        self._free_blocks += nblocks
        order = nblocks.bit_length() - 1
        top = self._arena_order(start_block)
        block = start_block
        while order < top:
            buddy = block ^ (1 << order)
            level = self._free[order]
            i = bisect_left(level, buddy)
            if i == len(level) or level[i] != buddy:
                break
            del level[i]
            block = min(block, buddy)
            order += 1
        insort(self._free[order], block)

    def _free_block_count(self) -> int:
        return self._free_blocks

    def free_lists(self) -> dict[int, list[int]]:
        """Free block addresses by order (only orders that have some)."""
        return {k: list(level) for k, level in enumerate(self._free) if level}

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        largest = max((k for k, level in enumerate(self._free) if level), default=None)
        out["largest_free_slots"] = 0 if largest is None else (1 << largest) * self.block_size
        return out

    def _check_free_space(self, owner: list[int | None]) -> None:
        arena_of: dict[int, tuple[int, int]] = {}
        for base, order in self.arenas:
            for b in range(base, base + (1 << order)):
                arena_of[b] = (base, order)
        for seq_id, seq in self._seqs.items():
            base, arena_order = arena_of[seq.start_block]
            assert seq.nblocks <= 1 << arena_order and (seq.start_block - base) % seq.nblocks == 0, (
                f"seq {seq_id}: region at block {seq.start_block} of {seq.nblocks} blocks is not a buddy block"
            )
            assert arena_order >= self.min_order, f"seq {seq_id} lies in an unusable arena"
        total = 0
        free_at: set[tuple[int, int]] = set()
        free_blocks: set[int] = set()
        for order, level in enumerate(self._free):
            assert level == sorted(set(level)), f"free list of order {order} is not sorted and distinct"
            for block in level:
                base, arena_order = arena_of.get(block, (None, -1))
                assert base is not None and arena_order >= order >= self.min_order, (
                    f"free block {block} of order {order} outside a fitting arena"
                )
                assert (block - base) % (1 << order) == 0, f"free block {block} misaligned for order {order}"
                for b in range(block, block + (1 << order)):
                    assert owner[b] is None, f"block {b} is free and owned by seq {owner[b]}"
                    assert b not in free_blocks, f"block {b} is in two free blocks"
                    free_blocks.add(b)
                free_at.add((block, order))
                total += 1 << order
        for block, order in free_at:
            if order < arena_of[block][1]:
                buddy = block ^ (1 << order)
                assert (buddy, order) not in free_at, f"free buddies {block} and {buddy} not merged (order {order})"
        assert total == self._free_blocks, f"free counter {self._free_blocks} != free lists {total}"
