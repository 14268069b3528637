"""The four strategies for mixed models (``allocators.grouped`` with one pool design each).

    uniform        every attention layer paged as if it were full attention (one group of all
                   their bytes, PagedAttention's view); state groups keep one block per request
    hybrid_static  one pool per group, split by ``ratios`` (default: the blocks one request of
                   ``split_len`` tokens, or of the most tokens the pool holds, holds at most in
                   each group, a window or chunk group its size plus one prefill chunk at the
                   worst block alignment; ``split_len`` defaults to half of ``max_model_len``)
    hybrid         one shared pool, a page size common to all groups: the page holds
                   ``block_size`` tokens of the smallest attention group (or, when the largest is
                   under 1.25x the smallest, of the largest: vLLM v1's rule), a larger group's
                   block takes as many pages as it needs, a state block enough pages for the state
    lcm            large pages of the least common multiple of the groups' block sizes, carved
                   into one group's blocks on demand (Jenga)
"""
from __future__ import annotations

from allocators.base import AllocatorError, ceil_div, check_length
from allocators.group_pools import LcmPool, SharedPool, StaticPools
from allocators.grouped import GroupedAllocator, GroupSpec, most_blocks_held, parse_groups


class UniformAllocator(GroupedAllocator):
    """Paging as if every attention layer were full (the baseline the hybrid papers use)."""

    name = "uniform"

    def __init__(self, num_slots: int, block_size: int = 16, groups=None, slot_bytes: int | None = None,
                 prefill_chunk: int = 2048, debug: bool = False) -> None:
        specs = parse_groups(groups)
        merged = [("full", None, sum(g.token_bytes for g in specs if g.kind != "state"), 0)]
        merged += [(g.kind, g.size, g.token_bytes, g.state_bytes) for g in specs if g.kind == "state"]
        super().__init__(num_slots, block_size, merged, slot_bytes, prefill_chunk, debug, model_groups=groups)

    def _make_pool(self):
        page = self.block_size * self.attention[0].token_bytes
        return SharedPool(self.pool_bytes, page, [1] + [ceil_div(g.state_bytes, page) for g in self.state])


class HybridAllocator(GroupedAllocator):
    """One block pool shared by every group, one page size (vLLM v1's hybrid KV cache)."""

    name = "hybrid"

    def _make_pool(self):
        sizes = [g.token_bytes for g in self.attention]
        unit = max(sizes) if max(sizes) < 1.25 * min(sizes) else min(sizes)
        page = self.block_size * unit
        pages = [ceil_div(s, unit) for s in sizes] + [ceil_div(g.state_bytes, page) for g in self.state]
        return SharedPool(self.pool_bytes, page, pages)


class LcmAllocator(GroupedAllocator):
    """Two-level: large pages of the LCM of the group block sizes, carved on demand (Jenga)."""

    name = "lcm"

    def _make_pool(self):
        return LcmPool(self.pool_bytes, _exact_block_bytes(self.groups, self.block_size))


class HybridStaticAllocator(GroupedAllocator):
    """One pool per group, the pool's bytes split by a fixed ratio."""

    name = "hybrid_static"

    def __init__(self, num_slots: int, block_size: int = 16, groups=None, slot_bytes: int | None = None,
                 ratios=None, split_len: int | None = None, max_model_len: int = 2048, prefill_chunk: int = 2048,
                 debug: bool = False) -> None:
        self._ratios = ratios
        self._max_model_len = check_length("max_model_len", max_model_len, 1)
        # default: half the context (measured: the best worse case over Mooncake and ShareGPT of
        # 2K..32K on Gemma-3-27B and gpt-oss-120b at a 32K context; README, mixed models)
        self._split_len = max(1, self._max_model_len // 2) if split_len is None else check_length("split_len", split_len, 1)
        super().__init__(num_slots, block_size, groups, slot_bytes, prefill_chunk, debug)

    def _make_pool(self):
        blocks = _exact_block_bytes(self.groups, self.block_size)
        if self._ratios is None:
            return StaticPools(self.pool_bytes, self._default_split(blocks), blocks)
        weights = list(self._ratios)
        if len(weights) != len(self.groups) or any(not isinstance(w, (int, float)) or w <= 0 for w in weights):
            raise AllocatorError(f"ratios must list {len(self.groups)} numbers > 0 (one per group: "
                                 f"{', '.join(g.kind for g in self.groups)}); got {self._ratios!r}")
        total = sum(weights)
        return StaticPools(self.pool_bytes, [int(self.pool_bytes * w / total) for w in weights], blocks)

    def _default_split(self, blocks: list[int]) -> list[int]:
        """Bytes per group, as the blocks one request holds at most in each (``most_blocks_held``:
        whole blocks, as admit and grow take them), the request of ``split_len`` tokens or, when
        the pool cannot hold that one, of the most tokens it can: every group then holds at least
        one such request, so that none is refused for want of a window, chunk or state block."""
        def held(length: int) -> list[int]:
            return [most_blocks_held(g, length, self.block_size, self.prefill_chunk) * b
                    for g, b in zip(self.groups, blocks)]

        length = self._split_len
        if sum(held(length)) > self.pool_bytes and sum(held(1)) <= self.pool_bytes:
            lo, hi = 1, length  # held(lo) fits, held(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if sum(held(mid)) <= self.pool_bytes else (lo, mid)
            length = lo
        weights = held(length)
        total = sum(weights)
        return [int(self.pool_bytes * w / total) for w in weights]


def _exact_block_bytes(groups: list[GroupSpec], block_size: int) -> list[int]:
    return [g.state_bytes if g.kind == "state" else block_size * g.token_bytes for g in groups]
