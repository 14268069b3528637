"""The GPU prefix cache's eviction knob (``eviction``) on paged_prefix and radix: exact orders."""
from __future__ import annotations

import pytest

from allocators import AllocatorError, PagedPrefixAllocator, RadixAllocator, build

A, B = [1, 2, 3, 4], [5, 6, 7, 8]
SCAN = [[10 + 4 * i + j for j in range(4)] for i in range(4)]  # four one-block prompts, never reused


def run(a, seq_id, tokens):
    """Admit, compute the prompt, commit, free; returns the cached tokens of the admit."""
    r = a.admit(seq_id, tokens, 64)
    assert r.ok
    a.grow(seq_id, len(tokens) - r.num_cached_tokens, tokens[r.num_cached_tokens:])
    a.commit()
    a.free(seq_id)
    return r.num_cached_tokens


def history(a):
    """A and B computed; A hit once (so it is frequent); then a scan of four new blocks."""
    run(a, 0, A)
    run(a, 1, B)
    assert run(a, 2, A + [99]) == 4
    for i, tokens in enumerate(SCAN):
        run(a, 3 + i, tokens)


@pytest.mark.parametrize("cls", [PagedPrefixAllocator, RadixAllocator])
@pytest.mark.parametrize("eviction", ["lru", "arc", "lfu", "slru"])
def test_a_frequent_block_outlives_a_scan_unless_lru(cls, eviction):
    a = cls(32, block_size=4, eviction=eviction, debug=True)  # 8 blocks
    history(a)
    if cls is PagedPrefixAllocator:
        order = a.cached_blocks()
        lru_order = [1, 0, 2, 3, 4, 5]  # least recently freed first: B, A (freed after its hit), scan
        assert order == (lru_order if eviction == "lru" else [1, 2, 3, 4, 5, 0])
    # a seven-block prompt takes the two free blocks and evicts five cached ones
    assert a.admit(10, list(range(100, 128)), 64).ok
    a.grow(10, 28, list(range(100, 128)))
    a.commit()
    a.free(10)
    assert a.stats()["evictions"] == 5
    survived = a.admit(11, A + [98], 64).num_cached_tokens
    assert survived == (0 if eviction == "lru" else 4)


def test_lru_default_is_the_least_recently_freed_order():
    a = PagedPrefixAllocator(32, block_size=4, debug=True)
    assert a.eviction == "lru"
    history(a)
    assert a.cached_blocks() == [1, 0, 2, 3, 4, 5] and a.free_blocks() == [6, 7, 1, 0, 2, 3, 4, 5]


@pytest.mark.parametrize("name", ["paged_prefix", "radix"])
def test_an_unknown_eviction_names_the_allowed_ones(name):
    with pytest.raises(AllocatorError, match=r"eviction: unknown eviction policy 'fifo'; allowed: lru, arc, lfu, slru"):
        build(name, 64, block_size=4, eviction="fifo")
