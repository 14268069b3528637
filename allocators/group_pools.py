"""Where the blocks of a mixed model's layer groups come from: the three pool designs.

Every layer group keeps its own block tables; a group's block holds ``block_size`` tokens of
that group's layers (or, for a state group, one request's state). Pools differ in how those
blocks are cut from the KV memory (``pool_bytes``):

- ``SharedPool``: one free list of pages of ``page_bytes``, common to all groups; a group's
  block takes ``pages_per_block[g]`` pages (vLLM v1's hybrid coordinator pads the groups to one
  page size the same way: the unused part of the last page is internal waste).
- ``StaticPools``: one free list per group, each of ``bytes[g]`` cut into blocks of that
  group's size (vLLM's early hybrid split).
- ``LcmPool``: large pages of the least common multiple of the groups' block sizes, carved into
  one group's blocks when that group needs one and returned whole once all its blocks are free
  (Jenga's two-level design). A carved block that is free stays the group's: ``external``.

Free lists hand out the front and take freed blocks at the back (least recently freed first).
Block ids are per group; ``SharedPool`` names a block by its first page. ``block_ids(g)``: how
many ids group ``g``'s blocks may have (``0 .. block_ids(g) - 1``), what an executor that keeps
one tensor per group sizes it by.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from allocators.base import AllocatorError


class SharedPool:
    def __init__(self, pool_bytes: int, page_bytes: int, pages_per_block: list[int]) -> None:
        self.page_bytes = page_bytes
        self.num_pages = pool_bytes // page_bytes
        if self.num_pages < 1:
            raise AllocatorError(f"the pool of {pool_bytes} bytes holds no page of {page_bytes} bytes")
        self.pages_per_block = pages_per_block
        self.block_bytes = [k * page_bytes for k in pages_per_block]
        self.pool_bytes = pool_bytes
        self._free: deque[int] = deque(range(self.num_pages))
        self._extra: dict[tuple[int, int], list[int]] = {}  # (group, first page) -> its other pages

    def fits(self, needs: Mapping[int, int], ever: bool = False) -> bool:
        pages = sum(n * self.pages_per_block[g] for g, n in needs.items())
        return pages <= (self.num_pages if ever else len(self._free))

    def fits_with(self, needs: Mapping[int, int], released: Mapping[int, list[int]]) -> bool:
        """Whether ``needs`` would fit once ``released`` (group -> block ids) went back to the pool."""
        back = sum(len(blocks) * self.pages_per_block[g] for g, blocks in released.items())
        return sum(n * self.pages_per_block[g] for g, n in needs.items()) <= len(self._free) + back

    def take(self, group: int) -> int:
        free = self._free
        first = free.popleft()
        k = self.pages_per_block[group]
        if k > 1:
            self._extra[(group, first)] = [free.popleft() for _ in range(k - 1)]
        return first

    def release(self, group: int, blocks: list[int]) -> None:
        for block in blocks:
            self._free.append(block)
            if self.pages_per_block[group] > 1:
                self._free.extend(self._extra.pop((group, block)))

    def free_bytes(self) -> int:
        return self.pool_bytes - (self.num_pages - len(self._free)) * self.page_bytes

    def block_ids(self, group: int) -> int:
        return self.num_pages


class StaticPools:
    def __init__(self, pool_bytes: int, group_bytes: list[int], block_bytes: list[int]) -> None:
        self.block_bytes = block_bytes
        self.num_blocks = [b // s for b, s in zip(group_bytes, block_bytes)]
        for g, n in enumerate(self.num_blocks):
            if n < 1:
                raise AllocatorError(f"group {g}'s share of {group_bytes[g]} bytes holds no block of {block_bytes[g]} bytes")
        self.pool_bytes = pool_bytes
        self._free = [deque(range(n)) for n in self.num_blocks]

    def fits(self, needs: Mapping[int, int], ever: bool = False) -> bool:
        return all(n <= (self.num_blocks[g] if ever else len(self._free[g])) for g, n in needs.items())

    def fits_with(self, needs: Mapping[int, int], released: Mapping[int, list[int]]) -> bool:
        """Whether ``needs`` would fit once ``released`` (group -> block ids) went back to the pool."""
        return all(n <= len(self._free[g]) + len(released.get(g, ())) for g, n in needs.items())

    def take(self, group: int) -> int:
        return self._free[group].popleft()

    def release(self, group: int, blocks: list[int]) -> None:
        self._free[group].extend(blocks)

    def free_bytes(self) -> int:
        used = sum((n - len(f)) * s for n, f, s in zip(self.num_blocks, self._free, self.block_bytes))
        return self.pool_bytes - used

    def block_ids(self, group: int) -> int:
        return self.num_blocks[group]


class LcmPool:
    def __init__(self, pool_bytes: int, block_bytes: list[int]) -> None:
        self.block_bytes = block_bytes
        self.large_bytes = math.lcm(*block_bytes)
        self.num_large = pool_bytes // self.large_bytes
        if self.num_large < 1:
            raise AllocatorError(f"the pool of {pool_bytes} bytes holds no large page of {self.large_bytes} bytes "
                                 f"(the least common multiple of the block sizes {block_bytes})")
        self.pool_bytes = pool_bytes
        self.per_large = [self.large_bytes // s for s in block_bytes]
        self._free_large: deque[int] = deque(range(self.num_large))
        self._carved: list[dict[int, deque[int]]] = [{} for _ in block_bytes]  # group: large page -> free blocks
        self._used: list[dict[int, int]] = [{} for _ in block_bytes]  # group: large page -> blocks in use
        self._free_small = [0] * len(block_bytes)

    def fits(self, needs: Mapping[int, int], ever: bool = False) -> bool:
        if ever:
            return sum(-(-n // self.per_large[g]) for g, n in needs.items()) <= self.num_large
        large = sum(-(-max(0, n - self._free_small[g]) // self.per_large[g]) for g, n in needs.items())
        return large <= len(self._free_large)

    def fits_with(self, needs: Mapping[int, int], released: Mapping[int, list[int]]) -> bool:
        """Whether ``needs`` would fit once the blocks ``released`` (group -> block ids) went back:
        a large page all of whose used blocks are released would be free whole."""
        free_large = len(self._free_large)
        free_small = list(self._free_small)
        for g, blocks in released.items():
            m, going = self.per_large[g], {}
            for block in blocks:
                going[block // m] = going.get(block // m, 0) + 1
            for large, n in going.items():
                if n == self._used[g][large]:
                    free_large += 1
                    free_small[g] -= m - n
                else:
                    free_small[g] += n
        large = sum(-(-max(0, n - free_small[g]) // self.per_large[g]) for g, n in needs.items())
        return large <= free_large

    def take(self, group: int) -> int:
        carved = self._carved[group]
        if not carved:
            large = self._free_large.popleft()
            m = self.per_large[group]
            carved[large] = deque(range(large * m, large * m + m))
            self._used[group][large] = 0
            self._free_small[group] += m
        large, free = next(iter(carved.items()))
        block = free.popleft()
        if not free:
            del carved[large]
        self._used[group][large] += 1
        self._free_small[group] -= 1
        return block

    def release(self, group: int, blocks: list[int]) -> None:
        m, carved, used = self.per_large[group], self._carved[group], self._used[group]
        for block in blocks:
            large = block // m
            carved.setdefault(large, deque()).append(block)
            self._free_small[group] += 1
            used[large] -= 1
            if not used[large]:  # every block of the large page is free: it goes back whole
                del used[large], carved[large]
                self._free_small[group] -= m
                self._free_large.append(large)

    def free_bytes(self) -> int:
        used = sum(sum(u.values()) * s for u, s in zip(self._used, self.block_bytes))
        return self.pool_bytes - used

    def block_ids(self, group: int) -> int:
        return self.num_large * self.per_large[group]
