"""Exact small cases per strategy: the placement and eviction policies are part of the spec."""
from __future__ import annotations

import pytest

from allocators import (
    GROUPED,
    STRATEGIES,
    AllocatorError,
    BuddyAllocator,
    ContiguousAllocator,
    CopyOp,
    Fit,
    MemoryUsage,
    PagedAllocator,
    PagedPrefixAllocator,
    build,
)


def contiguous(reserve="oracle", num_slots=64, **kw):
    return ContiguousAllocator(num_slots, block_size=4, reserve=reserve, max_model_len=64, debug=True, **kw)


def buddy(reserve="oracle", num_slots=64, **kw):
    return BuddyAllocator(num_slots, block_size=4, reserve=reserve, max_model_len=64, debug=True, **kw)


def admit(alloc, seq_id, prompt_len, final_len=None, max_len=64, tokens=None):
    prompt = tokens if tokens is not None else [seq_id] * prompt_len
    return alloc.admit(seq_id, prompt, max_len, final_len)


# -- contiguous ----------------------------------------------------------------------------------
def test_contiguous_first_fit_and_coalescing():
    a = contiguous()  # 16 blocks of 4 slots
    for seq, final in ((1, 16), (2, 8), (3, 16)):
        assert admit(a, seq, 1, final).ok
    assert [a.block_table(s) for s in (1, 2, 3)] == [[0, 1, 2, 3], [4, 5], [6, 7, 8, 9]]
    a.free(2)
    assert a.holes() == [(4, 2), (10, 6)]
    assert admit(a, 4, 1, 12).ok  # 3 blocks: the 2-block hole is too small
    assert a.block_table(4) == [10, 11, 12]
    assert admit(a, 5, 1, 5).ok  # 2 blocks: first fit is the lowest hole, not the best fit
    assert a.block_table(5) == [4, 5]
    assert a.holes() == [(13, 3)]
    a.free(5)
    a.free(1)  # coalesces with the hole at 4 on its right
    assert a.holes() == [(0, 6), (13, 3)]
    a.free(3)  # joins both neighbours
    assert a.holes() == [(0, 10), (13, 3)]
    a.free(4)
    assert a.holes() == [(0, 16)]


def test_contiguous_external_fragmentation_is_real():
    a = contiguous()
    for seq in range(4):
        assert admit(a, seq, 1, 16).ok  # 4 regions of 4 blocks fill the pool
    a.free(0)
    a.free(2)  # 8 blocks free, in two holes of 4
    r = admit(a, 9, 1, 20)  # 5 blocks
    assert r.fit is Fit.LATER and "20 slots" in r.reason
    assert a.holes() == [(0, 4), (8, 4)]
    assert a.usage({1: 16, 3: 16}) == MemoryUsage(token=0, reserved=32, internal=0, external=32)


@pytest.mark.parametrize("max_len, expect", [(24, 4), (32, 3), (100, 1)])
def test_reserve_max_holds_floor_pool_over_max_len(max_len, expect):
    a = ContiguousAllocator(100, block_size=4, reserve="max", max_model_len=100, debug=True)
    held = sum(admit(a, s, 1, 2, max_len=max_len).ok for s in range(10))
    assert held == expect == 100 // max_len


def test_reserve_max_refuses_a_max_len_beyond_the_pool():
    a = ContiguousAllocator(100, block_size=4, reserve="max", max_model_len=200, debug=True)
    r = admit(a, 1, 1, 2, max_len=101)
    assert r.fit is Fit.NEVER and "largest region" in r.reason


def test_contiguous_pow2_rounds_the_output_only_caps_at_max_len_and_oracle_is_exact():
    a = contiguous("pow2")
    assert admit(a, 1, 3, 20, max_len=24).ok  # 3 + next pow2 of 17 (32) = 35, capped at 24
    assert len(a.block_table(1)) == 6
    assert admit(a, 2, 3, 9).ok  # 3 + next pow2 of 6 (8) = 11 slots -> 3 blocks
    assert len(a.block_table(2)) == 3
    assert admit(a, 3, 5, 5).ok  # no output positions: the prompt only
    assert len(a.block_table(3)) == 2
    t = contiguous("pow2-total")
    assert admit(t, 2, 3, 9).ok  # next pow2 of the total 9 = 16 slots -> 4 blocks
    assert len(t.block_table(2)) == 4
    b = contiguous("oracle")
    assert admit(b, 1, 3, 10).ok  # 10 tokens -> 3 blocks
    assert b.block_table(1) == [0, 1, 2]


def test_pow2_books_its_output_slack_as_internal():
    a = contiguous("pow2")
    assert admit(a, 1, 6, 31).ok  # 25 output slots -> 32: region of 38 slots -> 10 blocks (40)
    assert a.block_table(1) == list(range(10))
    assert a.usage({1: 31}) == MemoryUsage(token=0, reserved=31, internal=9, external=24)


@pytest.mark.parametrize("reserve, prompt_len, final_len, blocks", [
    ("pow2", 6, 31, 16),  # 6 + 32 = 38 slots -> 10 blocks -> buddy region of 16
    ("pow2", 20, 30, 16),  # 20 + 16 = 36 slots -> 9 blocks -> 16: Pow2 differs from Oracle
    ("pow2-total", 20, 30, 8),  # next pow2 of 30 = 32 slots -> 8 blocks
    ("oracle", 20, 30, 8),  # 30 slots -> 8 blocks -> 8
    ("pow2", 3, 10, 4),  # 3 + 8 = 11 -> 3 blocks -> 4
    ("pow2-total", 3, 10, 4),  # 16 -> 4 blocks
])
def test_buddy_region_per_reserve_policy(reserve, prompt_len, final_len, blocks):
    a = buddy(reserve, num_slots=128)
    assert admit(a, 1, prompt_len, final_len).ok
    assert len(a.block_table(1)) == blocks


def test_internal_of_a_partly_filled_last_block():
    a = contiguous("oracle")
    assert admit(a, 1, 6, 10).ok
    assert a.usage({1: 10}) == MemoryUsage(token=0, reserved=10, internal=2, external=52)
    assert a.grow(1, 6) == [0, 1, 2, 3, 4, 5]
    assert a.usage({1: 10}) == MemoryUsage(token=6, reserved=4, internal=2, external=52)
    assert a.grow(1, 4) == [6, 7, 8, 9]
    assert a.usage({1: 10}) == MemoryUsage(token=10, reserved=0, internal=2, external=52)
    assert a.grow(1, 2) == [10, 11]  # the rounding slack may be used
    with pytest.raises(AllocatorError, match="outgrew its reserve=oracle region of 12 slots"):
        a.grow(1, 1)


def test_contiguous_double_moves_to_a_region_twice_as_large():
    a = contiguous("double", double_chunk=4)
    assert admit(a, 1, 6).ok  # 6 + 4 = 10 tokens -> 3 blocks at 0
    assert admit(a, 2, 2).ok  # 6 tokens -> 2 blocks at 3
    assert a.grow(1, 6) == list(range(6))
    assert a.grow(1, 6) == list(range(6, 12))
    assert a.take_copy_ops() == []
    assert a.grow(1, 1) == [20 + 12]  # moved to 6 blocks at block 5
    assert a.take_copy_ops() == [CopyOp(src=0, dst=20, length=12)]
    assert a.block_table(1) == [5, 6, 7, 8, 9, 10]
    assert a.holes() == [(0, 3), (11, 5)]
    assert a.stats()["moves"] == 1
    # out of room: a failed move changes nothing
    assert a.grow(1, 11) == list(range(33, 44))
    assert a.grow(1, 1) is None  # needs 12 blocks; the largest hole has 5
    assert a.take_copy_ops() == [] and a.block_table(1) == [5, 6, 7, 8, 9, 10] and a.num_tokens(1) == 24


def test_contiguous_fork_copies_into_a_new_region():
    a = contiguous("oracle")
    assert admit(a, 1, 5, 8).ok
    a.grow(1, 5)
    assert a.fork(1, 2, final_len=12)
    assert a.block_table(2) == [2, 3, 4]
    assert a.take_copy_ops() == [CopyOp(src=0, dst=8, length=5)]
    assert a.num_tokens(2) == 5
    assert a.grow(2, 1) == [13]
    assert not a.fork(1, 3, final_len=64)  # no 16-block hole
    assert a.live_sequences() == [1, 2] and a.take_copy_ops() == []


# -- buddy -------------------------------------------------------------------------------------
def test_buddy_splits_and_merges_exactly():
    a = buddy()  # 16 blocks: one arena of order 4
    assert admit(a, 1, 1, 4).ok  # 1 block
    assert a.block_table(1) == [0]
    assert a.free_lists() == {0: [1], 1: [2], 2: [4], 3: [8]}
    assert admit(a, 2, 1, 8).ok  # 2 blocks: the free order-1 block
    assert a.block_table(2) == [2, 3]
    assert admit(a, 3, 1, 5).ok  # 2 blocks: split the order-2 block at 4
    assert a.block_table(3) == [4, 5]
    assert a.free_lists() == {0: [1], 1: [6], 3: [8]}
    a.free(1)  # merges with its buddy 1 only (2 is taken)
    assert a.free_lists() == {1: [0, 6], 3: [8]}
    a.free(2)
    assert a.free_lists() == {1: [6], 2: [0], 3: [8]}
    a.free(3)  # 4+6 -> 4..7, + 0..3 -> 0..7, + 8..15 -> the whole arena
    assert a.free_lists() == {4: [0]}


def test_buddy_rounds_to_a_power_of_two():
    a = buddy()
    assert admit(a, 1, 1, 20).ok  # 5 blocks -> 8
    assert a.block_table(1) == list(range(8))
    a.grow(1, 20)
    assert a.usage({1: 20}) == MemoryUsage(token=20, reserved=0, internal=12, external=32)


def test_buddy_uses_every_arena_of_a_non_power_of_two_pool():
    a = buddy(num_slots=54)  # 13 blocks (2 tail slots unused): arenas 8 @0, 4 @8, 1 @12
    assert a.arenas == [(0, 3), (8, 2), (12, 0)]
    assert admit(a, 1, 1, 32).ok and a.block_table(1) == list(range(8))
    assert admit(a, 2, 1, 16).ok and a.block_table(2) == [8, 9, 10, 11]
    assert admit(a, 3, 1, 3).ok and a.block_table(3) == [12]
    assert admit(a, 4, 1, 3).fit is Fit.LATER
    r = admit(a, 5, 1, 36)  # 9 blocks -> 16: larger than the largest arena
    assert r.fit is Fit.NEVER and "largest region this pool holds is 32" in r.reason
    assert a.usage({1: 32, 2: 16, 3: 3}) == MemoryUsage(token=0, reserved=51, internal=1, external=2)
    for s in (1, 2, 3):
        a.free(s)
    assert a.free_lists() == {0: [12], 2: [8], 3: [0]}  # arenas never merge


def test_buddy_min_order_leaves_small_arenas_unused():
    a = buddy(num_slots=52, min_order=1)  # arenas 8 @0, 4 @8, 1 @12 (unusable)
    assert admit(a, 1, 1, 3).ok and a.block_table(1) == [8, 9]  # order >= 1: smallest free is @8
    assert a.free_lists() == {1: [10], 3: [0]}
    assert a.usage({1: 3}).external == 52 - 8
    with pytest.raises(AllocatorError, match="min_order=4"):
        buddy(num_slots=52, min_order=4)


def test_buddy_double_moves_up_one_order():
    a = buddy("double", double_chunk=2)
    assert admit(a, 1, 2).ok  # 4 tokens: 1 block at 0
    assert admit(a, 2, 2).ok  # 1 block at 1
    a.grow(1, 4)
    assert a.grow(1, 1) == [8 + 4]  # order 1: the block at 2
    assert a.take_copy_ops() == [CopyOp(src=0, dst=8, length=4)]
    assert a.block_table(1) == [2, 3]
    assert a.free_lists() == {0: [0], 2: [4], 3: [8]}


# -- paged ---------------------------------------------------------------------------------------
def test_paged_blocks_on_demand_and_free_order():
    a = PagedAllocator(32, block_size=4, debug=True)  # 8 blocks
    assert admit(a, 1, 6).ok and a.block_table(1) == [0, 1]
    assert admit(a, 2, 3).ok and a.block_table(2) == [2]
    assert a.grow(1, 6) == [0, 1, 2, 3, 4, 5]
    assert a.grow(1, 3) == [6, 7, 12]  # position 8 takes the next free block, 3
    assert a.grow(1, 0) == []
    a.free(1)
    assert a.free_blocks() == [4, 5, 6, 7, 3, 1, 0]  # to the back, tail block first


def test_paged_fork_shares_and_copies_on_write():
    a = PagedAllocator(32, block_size=4, debug=True)
    assert admit(a, 1, 6).ok
    a.grow(1, 6)
    assert a.fork(1, 2)
    assert a.block_table(2) == [0, 1] and a.ref_count(0) == a.ref_count(1) == 2
    assert a.usage({1: 6, 2: 8}) == MemoryUsage(token=6, reserved=2, internal=0, external=24)
    assert a.grow(2, 1) == [4 * 2 + 2]  # position 6 is in shared block 1: copy it to block 2
    assert a.take_copy_ops() == [CopyOp(src=4, dst=8, length=2)]
    assert a.block_table(2) == [0, 2] and a.ref_count(1) == 1 and a.ref_count(0) == 2
    assert a.grow(1, 1) == [6]  # block 1 is private again: no copy
    assert a.take_copy_ops() == []
    assert a.stats()["logical_slots"] == 14 and a.stats()["physical_slots"] == 10


def test_paged_full_shared_blocks_are_never_copied():
    a = PagedAllocator(32, block_size=4, debug=True)
    assert admit(a, 1, 8).ok
    a.grow(1, 8)
    assert a.fork(1, 2)
    assert a.grow(2, 1) == [8]  # a new block; blocks 0 and 1 stay shared
    assert a.take_copy_ops() == []
    assert a.block_table(2) == [0, 1, 2]


def test_paged_out_of_memory_changes_nothing():
    a = PagedAllocator(16, block_size=4, debug=True)  # 4 blocks
    assert admit(a, 1, 12).ok
    assert admit(a, 2, 8).fit is Fit.LATER
    r = admit(a, 3, 20, max_len=20)
    assert r.fit is Fit.NEVER and "pool has 4" in r.reason
    assert admit(a, 2, 4).ok
    a.grow(2, 4)
    assert a.fork(2, 3)
    assert a.grow(3, 1) is None  # needs a new block; none free
    assert a.block_table(3) == [3] and a.num_tokens(3) == 4 and a.take_copy_ops() == []
    assert a.usage({1: 12, 2: 4, 3: 5}) == MemoryUsage(token=4, reserved=12, internal=0, external=0)


def test_paged_internal_of_last_block():
    a = PagedAllocator(32, block_size=4, debug=True)
    assert admit(a, 1, 6).ok
    a.grow(1, 6)
    assert a.usage({1: 6}) == MemoryUsage(token=6, reserved=0, internal=2, external=24)
    assert a.usage({1: 7}) == MemoryUsage(token=6, reserved=1, internal=1, external=24)


# -- paged_prefix --------------------------------------------------------------------------------
P10 = list(range(100, 110))


def computed(a, seq_id, tokens, max_len=64):
    """Admit and grow through the whole prompt, then commit (the step that writes it ran)."""
    assert a.admit(seq_id, tokens, max_len).ok
    a.grow(seq_id, len(tokens) - a.num_tokens(seq_id), tokens[a.num_tokens(seq_id) :])
    a.commit()


def test_prefix_hits_share_full_blocks_of_the_prompt():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    assert a.stats()["prefix_hit_rate"] is None
    computed(a, 1, P10)
    assert a.block_table(1) == [0, 1, 2]
    r = a.admit(2, P10, 64)
    assert r.ok and r.num_cached_tokens == 8 and a.num_tokens(2) == 8
    assert a.block_table(2) == [0, 1, 3] and a.ref_count(0) == 2
    r = a.admit(3, P10[:8], 64)  # the last prompt token is always computed: 1 block only
    assert r.num_cached_tokens == 4 and a.block_table(3) == [0, 4]
    r = a.admit(4, P10[:4] + [0] * 6, 64)  # diverges in block 1
    assert r.num_cached_tokens == 4
    s = a.stats()
    assert (s["prefix_queries"], s["prefix_hits"]) == (2 + 2 + 1 + 2, 0 + 2 + 1 + 1)
    assert s["prefix_hit_rate"] == 4 / 7


def test_prefix_lru_eviction_order():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)  # 12 blocks
    computed(a, 1, list(range(12)))  # blocks 0, 1, 2 (all hashed)
    a.grow(1, 1, [99])  # block 3 holds one token: not hashed
    computed(a, 2, list(range(50, 58)))  # blocks 4, 5
    a.free(1)
    a.free(2)
    # unhashed block 3 goes to the front; hashed blocks to the back, tail first
    assert a.free_blocks() == [3, 6, 7, 8, 9, 10, 11, 2, 1, 0, 5, 4]
    assert a.cached_blocks() == [2, 1, 0, 5, 4]
    computed(a, 3, list(range(200, 232)))  # 8 fresh blocks: 3, 6..11, then evicts 2
    assert a.block_table(3) == [3, 6, 7, 8, 9, 10, 11, 2]
    assert a.cached_blocks() == [1, 0, 5, 4] and a.stats()["evictions"] == 1
    r = a.admit(4, list(range(12)) + [7], 64)  # blocks 0, 1 still cached; block 2 was evicted
    assert r.num_cached_tokens == 8
    assert a.block_table(4) == [0, 1, 5, 4]  # 2 fresh blocks evict 5 then 4 (least recently freed first)
    assert a.cached_blocks() == [] and a.stats()["evictions"] == 3


def test_prefix_hit_on_cached_free_blocks_counts_against_free_space():
    a = PagedPrefixAllocator(16, block_size=4, debug=True)  # 4 blocks
    computed(a, 1, list(range(12)))
    a.free(1)
    assert a.free_blocks() == [3, 2, 1, 0]
    assert admit(a, 9, 1).ok  # takes block 3
    before = (a.free_blocks(), a.stats())
    r = a.admit(2, list(range(16)), 64)  # 3 hits (all free) + 1 fresh > 3 free blocks
    assert r.fit is Fit.LATER and (a.free_blocks(), a.stats()) == before
    a.free(9)
    r = a.admit(2, list(range(16)), 64)
    assert r.num_cached_tokens == 12 and a.block_table(2) == [0, 1, 2, 3]


def test_prefix_guards_against_hash_collisions(monkeypatch):
    monkeypatch.setattr(PagedPrefixAllocator, "_hash_block", staticmethod(lambda parent, tokens: 42))
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    computed(a, 1, P10)  # block 0 takes hash 42; block 1's hash is taken, so it stays private
    assert a.admit(2, [0] * 10, 64).num_cached_tokens == 0  # same hash, other tokens: a miss
    assert a.admit(3, P10, 64).num_cached_tokens == 4  # block 1 would match only by hash: a miss


def test_prefix_unknown_token_ids_stop_hashing():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    computed(a, 1, [1, 2, 3, 4])
    a.grow(1, 4)  # generated tokens of unknown ids: block 1 is not hashable
    a.grow(1, 4, [9, 9, 9, 9])  # nor is anything after it
    assert a.admit(2, [1, 2, 3, 4, 0, 0, 0, 0, 9, 9, 9, 9, 5], 64).num_cached_tokens == 4


def test_prefix_fork_copy_on_write():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    computed(a, 1, P10)
    assert a.fork(1, 2)
    assert a.grow(2, 1, [7]) == [12 + 2]
    assert a.take_copy_ops() == [CopyOp(src=8, dst=12, length=2)]
    assert a.grow(2, 1, [7]) == [15]
    assert a.grow(2, 1, [7]) == [16]  # block 3 is full; block 4 is new
    a.commit()  # block 3 is hashed now
    assert a.stats()["cached_free_blocks"] == 0
    a.free(1)
    a.free(2)
    assert a.cached_blocks() == [3, 1, 0]


# -- bad input and the registry -------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_bad_input_raises_one_clear_error(name):
    small = {"vattention": dict(page_bytes=64, token_bytes=4),  # 16-token pages
             "paged_window": dict(window=64)}.get(name, {})
    if name in GROUPED:  # mixed-model strategies: one full group here
        small = dict(groups=[("full", None, 1, 0)])
    with pytest.raises(AllocatorError, match="block_size must be a power of two >= 1, got 0"):
        build(name, 64, block_size=0, **small)
    with pytest.raises(AllocatorError, match="power of two"):
        build(name, 64, block_size=12, **small)
    with pytest.raises(AllocatorError, match="smaller than one block"):
        build(name, 8, block_size=16, **small)
    a = build(name, 256, block_size=4, **small)
    with pytest.raises(AllocatorError, match="max_len must be an integer >= 1, got -1"):
        a.admit(1, [1], -1)
    with pytest.raises(AllocatorError, match="final_len must be an integer >= 0"):
        a.admit(1, [1], 8, -2)
    with pytest.raises(AllocatorError, match="unknown sequence 5"):
        a.free(5)
    with pytest.raises(AllocatorError, match="unknown sequence 5"):
        a.grow(5, 1)
    assert a.admit(1, [1, 2], 8, 4).ok
    with pytest.raises(AllocatorError, match="sequence 1 is already live"):
        a.admit(1, [1], 8, 4)
    with pytest.raises(AllocatorError, match="num_tokens must be an integer >= 0"):
        a.grow(1, -1)
    with pytest.raises(AllocatorError, match="past max_len=8"):
        a.grow(1, 9)
    r = a.admit(2, [1] * 9, 8, 9)
    assert r.fit is Fit.NEVER and "longer than max_len" in r.reason


def test_registry_names_strategies_and_knobs():
    assert set(STRATEGIES) == {"contiguous", "buddy", "paged", "paged_prefix", "paged_window", "radix", "vattention",
                               "uniform", "hybrid_static", "hybrid", "lcm", "hybrid_prefix", "lcm_prefix"}
    with pytest.raises(AllocatorError, match="unknown allocator 'slab'; allowed: contiguous, buddy, paged, paged_prefix, "
                                             "paged_window, radix, vattention, uniform, hybrid_static, hybrid, lcm, "
                                             "hybrid_prefix, lcm_prefix"):
        build("slab", 64)
    with pytest.raises(AllocatorError, match="allocator 'paged' has no knob reserve; allowed: block_size, debug"):
        build("paged", 64, reserve="max")
    with pytest.raises(AllocatorError, match="reserve must be one of max, pow2, pow2-total, oracle, double; got 'half'"):
        build("buddy", 64, reserve="half")
    assert isinstance(build("buddy", 64, block_size=4, min_order=1), BuddyAllocator)


@pytest.mark.parametrize("reserve", ["pow2", "pow2-total", "oracle"])
@pytest.mark.parametrize("cls", [ContiguousAllocator, BuddyAllocator])
def test_oracle_policies_need_final_len(cls, reserve):
    a = cls(256, block_size=4, reserve=reserve, max_model_len=64)
    with pytest.raises(AllocatorError, match=f"reserve='{reserve}' needs the true final_len"):
        a.admit(1, [1], 64)
    with pytest.raises(AllocatorError, match=r"final_len=1 must lie in \[2, max_len=64\]"):
        a.admit(1, [1, 2], 64, 1)
    r = a.admit(1, [1], 64, 70)
    assert r.fit is Fit.NEVER and "final_len=70 exceeds max_len=64" in r.reason
    r = a.admit(1, [1], 65, 2)
    assert r.fit is Fit.NEVER and "max_model_len=64" in r.reason


def test_prefix_blocks_grown_but_never_committed_are_not_cached():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    assert a.admit(0, [1, 2, 3, 4, 5], 64).ok
    a.grow(0, 5, [1, 2, 3, 4, 5])
    a.free(0)  # rolled back before the step that writes its K/V ran
    assert a.cached_blocks() == []
    assert a.admit(1, [1, 2, 3, 4, 9], 64).num_cached_tokens == 0
    a.grow(1, 5, [1, 2, 3, 4, 9])
    a.commit()
    a.free(1)
    assert a.admit(2, [1, 2, 3, 4, 7], 64).num_cached_tokens == 4  # committed: a hit


def test_prefix_fork_before_commit_hashes_once_at_commit():
    a = PagedPrefixAllocator(48, block_size=4, debug=True)
    assert a.admit(1, P10, 64).ok
    a.grow(1, 10, P10)
    assert a.fork(1, 2)
    a.free(1)  # the child still holds the blocks; nothing is hashed yet
    assert a.admit(3, P10, 64).num_cached_tokens == 0
    a.free(3)
    a.commit()
    assert a.admit(4, P10, 64).num_cached_tokens == 8


@pytest.mark.parametrize("name", ["paged_prefix", "radix"])
def test_prefix_fork_inside_the_prompt_does_not_inherit_the_parents_future_ids(name):
    # a restored group forks a child from a parent admitted with more prompt than it has computed
    a = build(name, 48, block_size=4, debug=True)
    assert a.admit(1, P10, 64).ok
    a.grow(1, 5, P10[:5])
    a.commit()
    assert a.fork(1, 2)
    a.grow(2, 4, [7, 7, 7, 7])  # the child's own tokens at positions 5..8
    a.commit()
    a.free(2)
    a.free(1)
    assert a.admit(3, P10, 64).num_cached_tokens == 4  # block 1 never held P10[4:8]
    assert a.admit(4, P10[:5] + [7, 7, 7, 0], 64).num_cached_tokens == 8
