"""Allocators for mixed models (allocators.hybrid): exact hand-made cases, equality with ``paged`` on
a uniform model, and random operation sequences checked against the contract per layer group."""
from __future__ import annotations

import random

import pytest

from allocators import GROUPED, AllocatorError, Fit, build
from allocators.grouped import DROPPED

# a Gemma-3-like pair: full attention on few layers (10 bytes a token), a window of 8 on many (52)
GEMMA = [("full", None, 10, 0), ("window", 8, 52, 0)]
MIXED = [("full", None, 10, 0), ("window", 8, 52, 0), ("chunked", 12, 20, 0), ("state", None, 0, 100)]
PLAIN = tuple(name for name in GROUPED if not name.endswith("_prefix"))  # no prefix cache: equal paged


def test_hybrid_pages_are_padded_to_the_smallest_group():
    a = build("hybrid", 100, block_size=4, groups=GEMMA, prefill_chunk=4, debug=True)
    # pool 100 slots * 62 bytes = 6200; page = 4 tokens * 10 bytes; the window group's block
    # takes ceil(52 / 10) = 6 pages (8 bytes a token of padding)
    assert (a.pool.page_bytes, a.pool.num_pages, a.pool.block_bytes) == (40, 155, [40, 240])
    assert a.admit(1, list(range(10)), 40).ok
    # full: 3 blocks (pages 0, 1, 2); window: min(10, 8 + 4) tokens -> 3 blocks of 6 pages
    assert a.group_tables(1) == [[0, 1, 2], [3, 9, 15]]
    assert a.grow(1, 10) == list(range(10))
    assert a.grow(1, 1) == [10]  # first = 10: the window of token 10 starts at 3; no whole block before it
    assert a.group_tables(1)[1] == [3, 9, 15]
    a.grow(1, 2)  # first = 11, oldest read 4: block 0 of the window group leaves
    # the dropped pages 3..8 go to the back of the free list; the full group takes page 21 first
    assert a.group_tables(1) == [[0, 1, 2, 21], [DROPPED, 9, 15, 22]]
    assert a.unit_bytes == 2  # gcd of 10, 52, 62, 40 and 240 bytes
    usage = a.usage({1: 20})
    # full: 13 tokens * 10 + reserved 3 * 10, internal 0; window: 3 live blocks, positions 4..12
    # computed (9 tokens * 52), reserved 3 * 52; padding 3 blocks * 4 tokens * 8 bytes
    assert usage.token * 2 == 13 * 10 + 9 * 52
    assert usage.reserved * 2 == 3 * 10 + 3 * 52
    assert usage.internal * 2 == 3 * 4 * 8
    assert usage.total * 2 == 6200
    assert a.stats()["window_freed_blocks"] == 1


def test_lcm_carves_large_pages_and_returns_them_whole():
    a = build("lcm", 100, block_size=4, groups=GEMMA, prefill_chunk=4, debug=True)
    # blocks of 40 and 208 bytes: large page lcm = 1040 bytes = 26 full blocks or 5 window blocks
    assert (a.pool.large_bytes, a.pool.num_large, a.pool.per_large) == (1040, 5, [26, 5])
    assert a.admit(1, list(range(10)), 40).ok
    assert a.group_tables(1) == [[0, 1, 2], [5, 6, 7]]  # carved from large page 0 (full) and 1 (window: 5..9)
    assert list(a.pool._free_large) == [2, 3, 4]
    u = a.usage({1: 10})
    assert a.unit_bytes == 2
    assert (u.token * 2, u.reserved * 2, u.internal * 2) == (0, 10 * 10 + 10 * 52, 2 * 10 + 2 * 52)
    a.free(1)
    assert list(a.pool._free_large) == [2, 3, 4, 0, 1]  # both large pages back, whole
    assert a.usage({}).external * 2 == 6200


def test_state_group_holds_one_block_per_request_and_fork_copies_it():
    groups = [("full", None, 10, 0), ("state", None, 0, 100)]
    for name in GROUPED:
        knobs = dict(max_model_len=16) if name == "hybrid_static" else {}
        a = build(name, 60, block_size=4, groups=groups, debug=True, **knobs)
        assert a.admit(1, [1] * 5, 16).ok
        a.grow(1, 5)
        assert len(a.group_tables(1)[-1]) == 1
        assert a.stats()["state_bytes"] >= 100
        assert a.fork(1, 2)
        assert a.group_tables(2)[-1] != a.group_tables(1)[-1]
        assert a.group_tables(2)[0] == a.group_tables(1)[0]  # attention blocks shared
        a.free(1), a.free(2)
        assert a.usage({}).external * a.unit_bytes == a.pool_bytes


def test_chunked_group_drops_blocks_before_the_current_chunk():
    a = build("hybrid", 400, block_size=4, groups=[("full", None, 10, 0), ("chunked", 8, 10, 0)],
              prefill_chunk=4, debug=True)
    assert a.admit(1, list(range(4)), 64).ok
    a.grow(1, 4)
    for _ in range(12):  # positions 4..15: from position 8 the block of 0..3 is unread, from 16 ...
        a.grow(1, 1)
    assert a.group_tables(1)[1][:1] == [DROPPED]
    a.grow(1, 1)  # first = 16: chunk 16..23; blocks 0..3 (positions 0..15) all left
    assert a.group_tables(1)[1][:4] == [DROPPED] * 4


def test_hybrid_static_splits_by_ratio():
    a = build("hybrid_static", 100, block_size=4, groups=GEMMA, ratios=[1, 1])
    assert a.pool.num_blocks == [3100 // 40, 3100 // 208]
    with pytest.raises(AllocatorError, match="ratios"):
        build("hybrid_static", 100, block_size=4, groups=GEMMA, ratios=[1])


def test_bad_groups_are_refused():
    for groups in ([], [("nope", None, 1, 0)], [("window", 0, 1, 0)], [("state", None, 0, 0)],
                   [("state", None, 0, 5)]):
        with pytest.raises(AllocatorError):
            build("hybrid", 100, block_size=4, groups=groups)


def test_uniform_pages_mixed_models_as_one_full_group():
    a = build("uniform", 100, block_size=4, groups=GEMMA)
    assert a.pool.block_bytes == [4 * 62] and len(a.attention) == 1


# -- on a uniform model every grouped strategy pages exactly as paged -------------------------
def _ops(seed: int, steps: int = 300):
    rng = random.Random(seed)
    live, next_id, out = [], 0, []
    for _ in range(steps):
        r = rng.random()
        if r < 0.25 or not live:
            out.append(("admit", next_id, [rng.randrange(9) for _ in range(rng.randrange(1, 30))], 60))
            live.append(next_id)
            next_id += 1
        elif r < 0.75:
            out.append(("grow", rng.choice(live), rng.choice((1, 1, 1, 3, 9))))
        elif r < 0.82:
            out.append(("fork", rng.choice(live), next_id))
            live.append(next_id)
            next_id += 1
        else:
            sid = rng.choice(live)
            live.remove(sid)
            out.append(("free", sid))
    return out


def _trace(alloc, ops):
    live, lens, out = set(), {}, []
    for op in ops:
        if op[0] == "admit":
            adm = alloc.admit(op[1], op[2], op[3])
            out.append(adm.fit)
            if adm.ok:
                live.add(op[1])
                lens[op[1]] = op[3]
        elif op[0] == "grow":
            if op[1] not in live:
                continue
            n = min(op[2], lens[op[1]] - alloc.num_tokens(op[1]))
            out.append(alloc.grow(op[1], n))
        elif op[0] == "fork":
            if op[1] not in live:
                continue
            out.append(alloc.fork(op[1], op[2]))
            live.add(op[2])
            lens[op[2]] = lens[op[1]]
        else:
            if op[1] not in live:
                continue
            alloc.free(op[1])
            live.discard(op[1])
        out.append({s: (alloc.block_table(s), alloc.num_tokens(s)) for s in sorted(live)})
        usage = alloc.usage({s: lens[s] for s in live})
        out.append(usage)  # in slots for a uniform model (unit_bytes = one slot)
        out.append(alloc.take_copy_ops())
    return out


@pytest.mark.parametrize("name", PLAIN)
@pytest.mark.parametrize("seed", range(4))
def test_on_a_uniform_model_every_grouped_strategy_equals_paged(name, seed):
    ops = _ops(seed)
    paged = build("paged", 96, block_size=4)
    grouped = build(name, 96, block_size=4, groups=[("full", None, 7, 0)], debug=True)
    assert _trace(grouped, ops) == _trace(paged, ops)


# -- random operations on a mixed model: the contract per group --------------------------------
def _oldest_read(spec, n: int) -> int:
    """First position the next token (position n) of a group reads."""
    if spec.kind == "window":
        return max(0, n + 1 - spec.size)
    if spec.kind == "chunked":
        return n // spec.size * spec.size
    return 0


@pytest.mark.parametrize("name", GROUPED)
@pytest.mark.parametrize("seed", range(3))
def test_random_ops_keep_every_group_reading_its_own_tokens(name, seed):
    knobs = dict(max_model_len=60) if name == "hybrid_static" else {}
    a = build(name, 200, block_size=4, groups=MIXED, prefill_chunk=8, debug=True, **knobs)
    values: dict[tuple[int, int, int], tuple[int, int]] = {}  # (group, block, offset) -> (seq, position)
    live: dict[int, int] = {}
    rng = random.Random(seed)
    specs = a.attention
    for step in range(400):
        r = rng.random()
        if r < 0.2 or not live:
            sid = step
            before = a.usage({s: 60 for s in live})
            adm = a.admit(sid, [1] * rng.randrange(1, 40), 60)
            if adm.ok:
                live[sid] = 0
            else:
                assert a.usage({s: 60 for s in live}) == before
        elif r < 0.85:
            sid = rng.choice(list(live))
            n = min(rng.choice((1, 1, 2, 7)), 60 - live[sid])
            slots = a.grow(sid, n)
            if slots is not None:
                start = live[sid]
                live[sid] = start + n
                for g, table in enumerate(a.group_tables(sid)[:len(specs)]):
                    for p in range(start // 4 * 4, start + n):  # a copied-on-write block: its earlier positions too
                        values[(g, table[p // 4], p % 4)] = (sid, p)
        elif r < 0.9:
            parent = rng.choice(list(live))
            if a.fork(parent, 1000 + step):
                live[1000 + step] = live[parent]
        else:
            sid = rng.choice(list(live))
            a.free(sid)
            del live[sid]
        for sid, n in live.items():
            tables = a.group_tables(sid)
            for g, spec in enumerate(specs):
                oldest = _oldest_read(spec, n)
                for p in range(oldest, n):
                    block = tables[g][p // 4]
                    assert block != DROPPED, f"{name}: seq {sid} group {spec.kind} dropped position {p}"
                    owner, pos = values[(g, block, p % 4)]
                    assert pos == p, f"{name}: group {spec.kind} block {block} holds position {pos}, not {p}"
        usage = a.usage({s: 60 for s in live})
        assert usage.total * a.unit_bytes == a.pool_bytes
        assert min(usage.token, usage.reserved, usage.internal, usage.external) >= 0
    for sid in list(live):
        a.free(sid)
    assert a.usage({}).external * a.unit_bytes == a.pool_bytes


def test_hybrid_static_default_split_is_one_request_of_half_the_context():
    a = build("hybrid_static", 100, block_size=4, groups=GEMMA, max_model_len=64, prefill_chunk=4)
    # split_len 32, in the blocks one request holds at most: full 8 blocks of 40 bytes = 320; window
    # its 8 plus a 4-token prefill chunk, 11 positions read and written by one grow, at the worst
    # alignment 4 blocks of 208 = 832 (admit takes 12 tokens': 3). Of the 6200 bytes:
    # int(6200 * 320 / 1152) = 1722 -> 43 blocks of 40; int(6200 * 832 / 1152) = 4477 -> 21 of 208
    assert a.pool.num_blocks == [43, 21]
    b = build("hybrid_static", 100, block_size=4, groups=GEMMA, max_model_len=64, prefill_chunk=4, split_len=8)
    # 8 tokens: full 80, window 8 * 52 = 416 -> int(6200 * 80 / 496) = 1000 -> 25; int(6200 * 416 / 496) = 5200 -> 25
    assert b.pool.num_blocks == [25, 25]
