"""Every eviction policy's exact order on hand-made access strings (allocators.cache_policy)."""
from __future__ import annotations

import random

import pytest

from allocators.cache_policy import POLICIES, ARCPolicy, make_policy


def drive(policy, accesses: str, capacity: int) -> list[str]:
    """A cache of ``capacity`` keys: a hit is an access, a miss evicts when full, then adds.
    Returns the victims in order."""
    victims = []
    for now, key in enumerate(accesses.split()):
        if key in policy:
            policy.access(key, now)
            continue
        if len(policy) == capacity:
            victims.append(policy.evict())
        policy.add(key, now)
    return victims


CASES = {
    # a is hit once, then a scan of new keys passes through a cache of three
    "lru": ("a b c a d b e", ["b", "c", "a"]),
    "arc": ("a b c a d b e", ["b", "c", "a"]),
    "lfu": ("a a b c d b e f", ["b", "c", "a", "d"]),
    "slru": ("a b c a d b e", ["b", "c", "d"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_eviction_order_on_a_hand_made_string(name):
    accesses, victims = CASES[name]
    assert drive(make_policy(name, 3), accesses, 3) == victims


def test_lru_orders_by_time_and_equal_times_by_add():
    p = make_policy("lru", 8)
    for key, now in (("x", 5), ("y", 2), ("z", 5), ("w", 2)):
        p.add(key, now)
    assert p.order() == ["y", "w", "x", "z"]
    p.access("y", 9)
    p.remove("w")
    assert p.order() == ["x", "z", "y"]
    assert [p.evict() for _ in range(3)] == ["x", "z", "y"]


def test_arc_ghost_hits_move_p_both_ways():
    p = ARCPolicy(3)
    assert drive(p, "a b c a d b", 3) == ["b", "c"]
    # b came back from B1: p rises by max(|B2| / |B1|, 1) = 1 and b enters T2
    assert p.p == 1.0 and list(p.t2) == ["a", "b"] and list(p.t1) == ["d"] and list(p.b1) == ["c"]
    assert drive(p, "e", 3) == ["a"]  # |T1| = 1 <= p: T2's oldest goes, to B2
    assert list(p.b2) == ["a"]
    victims = []
    for key in ("a",):  # a returns from B2: T1 is over p, so d goes; then p falls by |B1|/|B2| = 2
        victims.append(p.evict())
        p.add(key)
    assert victims == ["d"] and p.p == 0.0 and list(p.t2) == ["b", "a"]


def test_arc_frequency_survives_a_scan_that_flushes_lru():
    accesses = "a b a b c d e f g a b"
    lru, arc = make_policy("lru", 3), make_policy("arc", 3)
    assert drive(lru, accesses, 3) == ["a", "b", "c", "d", "e", "f"]
    assert drive(arc, accesses, 3) == ["c", "d", "e", "f"]  # T2 holds a and b through the scan: both hit


def test_arc_and_slru_remember_a_hit_while_in_use():
    for name, where in (("arc", "t2"), ("slru", "protected")):
        p = make_policy(name, 4)
        p.add("k")
        p.access("k")
        p.remove("k")  # taken into use after the hit
        assert "k" not in p
        p.add("k")  # released: back among the frequent ones
        assert list(getattr(p, where)) == ["k"]


def test_lfu_aging_lets_a_once_popular_key_go():
    p = make_policy("lfu", 2)
    # a: count 3, priority 3. b enters at 1 and goes (age 1); c enters at 1 + 1 and goes (age 2);
    # d enters at 1 + 2 = 3, level with a, and a (older) goes: three hits bought a only two scans
    assert drive(p, "a a a b c d e", 2) == ["b", "c", "a"]
    assert p.age == 3
    assert p.order() == ["d", "e"]  # d 3, e 1 + 3 = 4


def test_requeue_puts_a_trimmed_victim_back_first():
    for name in POLICIES:
        p = make_policy(name, 4)
        for now, key in enumerate("abc"):
            p.add(key, now)
        victim = p.evict()
        p.requeue(victim, 0)
        assert p.evict() == victim, name
        assert len(p) == 2


def test_alive_veto_drops_the_key_silently():
    for name in POLICIES:
        q = make_policy(name, 4)
        for now, key in enumerate("abc"):
            q.add(key, now)
        order = q.order()
        assert q.evict(lambda k: k != order[0]) == order[1], name
        assert order[0] not in q and len(q) == 1, name


def test_unknown_policy_names_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: lru, arc, lfu, slru"):
        make_policy("fifo", 4)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_order_predicts_evictions_on_random_operations(name):
    rng = random.Random(7)
    p = make_policy(name, 6)
    evictable: set[str] = set()
    for now in range(400):
        key = f"k{rng.randrange(12)}"
        op = rng.random()
        if key in evictable and op < 0.4:
            p.access(key, now)
        elif key in evictable and op < 0.55:
            p.remove(key)
            evictable.discard(key)
        elif key not in evictable and op < 0.8:
            p.add(key, now)
            evictable.add(key)
        elif evictable:
            expected = p.order()[0]
            assert p.evict() == expected
            evictable.discard(expected)
        assert set(p.order()) == evictable and len(p) == len(evictable)


def test_ordered_lru_keeps_the_heap_lru_order_when_times_never_decrease():
    rng = random.Random(11)
    heap, ordered = make_policy("lru", 8), make_policy("lru", 8, monotone=True)
    assert type(heap).__name__ == "LRUPolicy" and type(ordered).__name__ == "OrderedLRUPolicy"
    evictable: set[str] = set()
    for now in range(600):
        key = f"k{rng.randrange(10)}"
        op = rng.random()
        if key in evictable and op < 0.3:
            heap.access(key, now)
            ordered.access(key, now)
        elif key in evictable and op < 0.5:
            heap.remove(key)
            ordered.remove(key)
            evictable.discard(key)
        elif key not in evictable and op < 0.8:
            heap.add(key, now)
            ordered.add(key, now)
            evictable.add(key)
        elif evictable:
            victim = heap.evict()
            assert ordered.evict() == victim
            evictable.discard(victim)
        assert heap.order() == ordered.order()
