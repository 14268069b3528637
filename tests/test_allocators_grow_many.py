"""``grow_many`` is ``grow`` called in order up to the first sequence out of memory: the same
slots, the same books (block tables, free list, copy ops, usage), for every strategy, through
shared blocks (copy-on-write), new blocks and an exhausted pool."""
from __future__ import annotations

import random

import pytest

from allocators import build

STRATEGIES = [
    ("paged", dict(num_slots=96, block_size=4)),
    ("paged_prefix", dict(num_slots=96, block_size=4)),
    ("radix", dict(num_slots=96, block_size=4)),
    ("paged_window", dict(num_slots=96, block_size=4, window=9)),
    ("buddy", dict(num_slots=128, block_size=4, reserve="double", max_model_len=64, double_chunk=4)),
    ("contiguous", dict(num_slots=128, block_size=4, reserve="double", max_model_len=64, double_chunk=4)),
    ("vattention", dict(num_slots=96, block_size=4, page_bytes=64, token_bytes=4)),
]


def books(alloc, live: list[int]) -> tuple:
    finals = {s: 64 for s in live}
    cached = tuple(alloc.cached_blocks()) if hasattr(alloc, "cached_blocks") else ()  # prefix caches
    return (tuple(tuple(alloc.block_table(s)) for s in live), tuple(alloc.num_tokens(s) for s in live),
            alloc.usage(finals), tuple(alloc.take_copy_ops()), alloc.stats(), cached)


def twins(name: str, knobs: dict, seed: int):
    """Two allocators in the same state: sequences admitted, prefilled and forked."""
    rng = random.Random(seed)
    pair = [build(name, **knobs), build(name, **knobs)]
    live = []
    for seq_id in range(6):
        prompt = [rng.randrange(50) for _ in range(rng.randint(2, 9))]
        for alloc in pair:
            if alloc.admit(seq_id, prompt, 64, 64).ok:
                assert alloc.grow(seq_id, len(prompt) - 1, prompt[:-1]) is not None
        if pair[0].live_sequences() and seq_id in pair[0].live_sequences():
            live.append(seq_id)
    for child, parent in ((10, live[0]), (11, live[1])):
        if all(alloc.fork(parent, child, 64) for alloc in pair):
            live.append(child)
    for alloc in pair:
        alloc.commit()
    return pair, live, rng


@pytest.mark.parametrize("name,knobs", STRATEGIES, ids=[n for n, _ in STRATEGIES])
@pytest.mark.parametrize("seed", range(3))
def test_grow_many_is_grow_in_order_up_to_the_first_out_of_memory(name, knobs, seed):
    (one, many), live, rng = twins(name, knobs, seed)
    short = 0
    for step in range(40):
        grows = [(s, [rng.randrange(50)]) for s in live]
        if step % 7 == 3:
            grows[0] = (grows[0][0], [1, 2, 3])  # a chunk among the decodes
        want = []
        for seq_id, ids in grows:
            slots = one.grow(seq_id, len(ids), ids)
            if slots is None:
                break
            want.append(slots)
        assert many.grow_many(grows) == want, f"step {step}"
        assert books(one, live) == books(many, live), f"step {step}"
        if len(want) < len(grows):  # out of memory: free the last sequence in both, as a preemption would
            short += 1
            victim = live.pop()
            one.free(victim)
            many.free(victim)
            if not live:
                break
        one.commit()
        many.commit()
    assert short, "the pool never ran out: the test missed the stop"
