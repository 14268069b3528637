"""Exact small cases of the radix prefix cache: matching, splitting, eviction order, computed-only."""
from __future__ import annotations

from allocators import RadixAllocator


def radix(num_slots=32, block_size=4, **kw):
    return RadixAllocator(num_slots, block_size=block_size, debug=True, **kw)


def run(a, seq_id, tokens, out=()):
    """Admit, compute the prompt and ``out``, mark computed; returns the admission."""
    r = a.admit(seq_id, tokens, 64)
    assert r.ok
    a.grow(seq_id, len(tokens) - r.num_cached_tokens, tokens[r.num_cached_tokens:])
    if out:
        a.grow(seq_id, len(out), list(out))
    a.commit()
    return r


def test_token_granular_longest_prefix_match_and_split():
    a = radix(block_size=1)
    run(a, 0, [1, 2, 3, 4, 5])
    a.free(0)
    r = a.admit(1, [1, 2, 3, 9, 9], 64)  # matches 3 tokens: the node [1..5] splits after 3
    assert r.num_cached_tokens == 3
    assert a.block_table(1)[:3] == [0, 1, 2]
    assert a.stats()["prefix_hits"] == 3 and a.stats()["prefix_queries"] == 4 + 4


def test_whole_pages_only_and_the_last_prompt_token_is_always_computed():
    a = radix(block_size=4)
    run(a, 0, list(range(8)))
    a.free(0)
    assert a.admit(1, list(range(8)), 64).num_cached_tokens == 4  # prompt[:-1] holds one full page
    assert a.admit(2, list(range(9)), 64).num_cached_tokens == 8


def test_uncomputed_tokens_are_never_matchable():
    a = radix(block_size=1)
    a.admit(0, [1, 2, 3, 4, 5], 64)
    a.grow(0, 5, [1, 2, 3, 4, 5])  # grown, never computed: the engine rolled the step back
    a.free(0)
    assert a.admit(1, [1, 2, 3, 4, 9], 64).num_cached_tokens == 0
    assert a.cached_blocks() == []


def test_running_insert_offers_a_computed_prompt_to_later_requests():
    a = radix(block_size=4)
    run(a, 0, list(range(9)))
    assert a.admit(1, list(range(9)), 64).num_cached_tokens == 8
    b = radix(block_size=4, insert_running=False)
    run(b, 0, list(range(9)))
    assert b.admit(1, list(range(9)), 64).num_cached_tokens == 0


def test_a_duplicate_computed_concurrently_adopts_the_tree_block():
    a = radix(block_size=4)
    for seq in (0, 1):  # both admitted before either prompt was computed
        assert a.admit(seq, list(range(9)), 64).ok
    a.grow(0, 9, list(range(9)))
    a.grow(1, 9, list(range(9)))
    a.commit()  # seq 0 inserts first; seq 1 re-points its pages at seq 0's blocks
    assert a.block_table(1)[:2] == a.block_table(0)[:2]
    assert a.stats()["allocated_slots"] == 4 * 4  # 2 shared pages + a private last page each


def test_lru_leaves_are_evicted_tail_first():
    a = radix(num_slots=16, block_size=4)  # 4 pages
    run(a, 0, [1] * 8 + [0])  # pages 0, 1 (+ page 2 for the last token)
    a.free(0)
    run(a, 1, [2] * 4 + [0])  # free pages: 3, then 2 (seq 0's partial last page was freed)
    a.free(1)
    assert sorted(a.cached_blocks()) == [0, 1, 3]
    assert a.usage({}).cached == 12 and a.usage({}).external == 4
    r = a.admit(2, [5] * 13, 64)  # needs 4 pages: the free one, then evicts oldest leaf tail first
    assert r.ok and a.block_table(2) == [2, 1, 0, 3]
    assert a.stats()["evictions"] == 3


def test_a_cached_hit_needs_no_free_block():
    a = radix(num_slots=12, block_size=4)
    run(a, 0, [1] * 8 + [0])
    a.free(0)
    assert a.admit(1, [7] * 4, 64).ok  # takes the free page
    r = a.admit(2, [1] * 8 + [3], 64)  # two cached pages revived, needs one more: evicts nothing
    assert not r.ok  # 2 revived hits + 1 fresh page, but only the 2 cached pages are room
    a.free(1)
    assert a.admit(2, [1] * 8 + [3], 64).num_cached_tokens == 8
