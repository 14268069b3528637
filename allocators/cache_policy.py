"""Eviction orders behind one seam: which evictable key of a cache goes first.

A cache (the GPU prefix cache of ``paged_prefix`` or ``radix``, a host or disk tier) owns its
keys and their storage; a ``CachePolicy`` only orders the keys that may be evicted now. The
cache tells it five things, each O(1) or O(log n):

    add(key, now)      key becomes evictable (stored, or released by its last user)
    access(key, now)   a hit on key, evictable or in use (an evictable key stays evictable)
    remove(key)        key leaves the evictable set without eviction (taken into use)
    evict(alive)       the victim: it leaves the evictable set (a ghost may remember it)
    requeue(key, now)  the last victim was only trimmed (a radix leaf gave up one page): it
                       goes back where it was, no access counted, its ghost dropped

``now`` is the cache's logical clock (any non-decreasing integer); only ``lru`` orders by it.
``alive(key)`` lets a cache with lazy books (radix) veto a key: a key it rejects is dropped
silently. ``capacity`` (entries) bounds ARC's ghost lists and SLRU's protected segment.

Policies (``POLICIES``):

* ``lru``: least recent ``now`` first; equal times in order of ``add``. A key re-added with a
  new time moves; with the same time it keeps its place and gains a later one. Callers whose
  times never decrease get the same order from an OrderedDict (``make_policy(monotone=True)``).
* ``arc``: Megiddo and Modha's adaptive replacement cache. T1 holds keys seen once, T2 keys
  seen twice or more (an access, or a return from a ghost list); B1 and B2 remember keys
  evicted from T1 and T2. A key added while in B1 raises the target size ``p`` of T1 by
  max(|B2| / |B1|, 1); in B2 lowers it by max(|B1| / |B2|, 1); either way it enters T2. The
  victim is T1's oldest while |T1| > p (or T2 is empty), else T2's oldest. A key accessed
  while in use re-enters T2 when added back. Ghosts: |T1| + |B1| <= capacity and all four
  lists <= 2 x capacity, oldest ghost dropped first.
* ``lfu``: least frequently used with dynamic aging (LFU-DA): a key's priority is its access
  count plus the cache's age ``L``, and ``L`` becomes the priority of each victim, so old
  counts stop protecting keys nobody asks for. Ties: the earlier ``add`` or access first.
* ``slru``: segmented LRU: new keys enter the probationary segment, an accessed key moves to
  the protected one (at most ``protected_frac`` x capacity; its oldest is demoted to the
  probationary MRU). Victim: the probationary oldest, else the protected oldest.
"""
from __future__ import annotations

import abc
import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable

Key = Hashable


def _always(key: Key) -> bool:
    return True


class CachePolicy(abc.ABC):
    """Order of eviction among a cache's evictable keys; see the module docstring."""

    name = ""

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity

    @abc.abstractmethod
    def add(self, key: Key, now: int = 0) -> None: ...

    @abc.abstractmethod
    def access(self, key: Key, now: int = 0) -> None: ...

    @abc.abstractmethod
    def remove(self, key: Key) -> None: ...

    @abc.abstractmethod
    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        """The victim; an error (IndexError or KeyError) when nothing is evictable."""

    @abc.abstractmethod
    def requeue(self, key: Key, now: int = 0) -> None: ...

    @abc.abstractmethod
    def __contains__(self, key: Key) -> bool: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def order(self) -> list[Key]:
        """Evictable keys in eviction order (tests and debug views; not on the hot path)."""


class LRUPolicy(CachePolicy):
    """Least recent ``now`` first (a heap with lazy deletion)."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._stamp: dict[Key, int] = {}  # evictable key -> its time
        self._heap: list[tuple[int, int, Key]] = []
        self._pushes = 0

    def add(self, key: Key, now: int = 0) -> None:
        self._stamp[key] = now
        self._pushes += 1
        heapq.heappush(self._heap, (now, self._pushes, key))
        if len(self._heap) > 4 * len(self._stamp) + 64:
            self._compact()

    def access(self, key: Key, now: int = 0) -> None:
        if key in self._stamp and self._stamp[key] != now:
            self.add(key, now)

    def remove(self, key: Key) -> None:
        self._stamp.pop(key, None)

    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        heap, stamp = self._heap, self._stamp
        while True:
            now, _, key = heapq.heappop(heap)
            if stamp.get(key) != now:
                continue  # stale entry
            if not alive(key):
                del stamp[key]
                continue
            del stamp[key]
            return key

    def requeue(self, key: Key, now: int = 0) -> None:
        """Back at time ``now``, after the keys of equal time (radix re-offers a trimmed leaf so)."""
        self.add(key, now)

    def _compact(self) -> None:
        stamp = self._stamp
        self._heap = [e for e in self._heap if stamp.get(e[2]) == e[0]]
        heapq.heapify(self._heap)

    def __contains__(self, key: Key) -> bool:
        return key in self._stamp

    def __len__(self) -> int:
        return len(self._stamp)

    def order(self) -> list[Key]:
        seen: set = set()
        out = []
        for now, _, key in sorted(self._heap, key=lambda e: e[:2]):
            if self._stamp.get(key) == now and key not in seen:
                seen.add(key)
                out.append(key)
        return out


class OrderedLRUPolicy(CachePolicy):
    """``lru`` for callers whose times never decrease (``paged_prefix``, the tiers): the order of
    the last add or access is the order of time, so an OrderedDict keeps it in O(1)."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._keys: OrderedDict[Key, None] = OrderedDict()

    def add(self, key: Key, now: int = 0) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)

    def access(self, key: Key, now: int = 0) -> None:
        if key in self._keys:
            self._keys.move_to_end(key)

    def remove(self, key: Key) -> None:
        self._keys.pop(key, None)

    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        while True:
            key, _ = self._keys.popitem(last=False)
            if alive(key):
                return key

    def requeue(self, key: Key, now: int = 0) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key, last=False)

    def __contains__(self, key: Key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def order(self) -> list[Key]:
        return list(self._keys)


class ARCPolicy(CachePolicy):
    """Adaptive replacement: recency list T1, frequency list T2, ghosts B1 and B2, target p."""

    name = "arc"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.t1: OrderedDict[Key, None] = OrderedDict()
        self.t2: OrderedDict[Key, None] = OrderedDict()
        self.b1: OrderedDict[Key, None] = OrderedDict()
        self.b2: OrderedDict[Key, None] = OrderedDict()
        self.p = 0.0  # target size of T1
        self._frequent_in_use: set[Key] = set()  # accessed while in use: re-enter T2
        self._last: tuple[Key, bool] | None = None  # last victim, and whether it came from T2

    def add(self, key: Key, now: int = 0) -> None:
        if key in self.t1 or key in self.t2:
            self.access(key, now)
            return
        if key in self._frequent_in_use:
            self._frequent_in_use.discard(key)
            self.t2[key] = None
        elif key in self.b1:
            self.p = min(float(self.capacity), self.p + max(len(self.b2) / len(self.b1), 1.0))
            del self.b1[key]
            self.t2[key] = None
        elif key in self.b2:
            self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            del self.b2[key]
            self.t2[key] = None
        else:
            self.t1[key] = None
        self._trim_ghosts()

    def access(self, key: Key, now: int = 0) -> None:
        if key in self.t1:
            del self.t1[key]
            self.t2[key] = None
        elif key in self.t2:
            self.t2.move_to_end(key)
        else:
            self._frequent_in_use.add(key)

    def remove(self, key: Key) -> None:
        if key in self.t2:
            del self.t2[key]
            self._frequent_in_use.add(key)
        else:
            self.t1.pop(key, None)

    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        while True:
            from_t2 = not self.t1 or (self.t2 and len(self.t1) <= self.p)
            source, ghosts = (self.t2, self.b2) if from_t2 else (self.t1, self.b1)
            key, _ = source.popitem(last=False)
            if alive(key):
                ghosts[key] = None
                self._last = (key, bool(from_t2))
                self._trim_ghosts()
                return key

    def requeue(self, key: Key, now: int = 0) -> None:
        if self._last is None or self._last[0] != key:
            raise ValueError(f"requeue({key!r}) is not the last victim")
        _, from_t2 = self._last
        self._last = None
        (self.b2 if from_t2 else self.b1).pop(key, None)
        source = self.t2 if from_t2 else self.t1
        source[key] = None
        source.move_to_end(key, last=False)

    def _trim_ghosts(self) -> None:
        c = self.capacity
        while self.b1 and len(self.t1) + len(self.b1) > c:
            self.b1.popitem(last=False)
        while len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) > 2 * c and (self.b1 or self.b2):
            (self.b2 if self.b2 else self.b1).popitem(last=False)

    def __contains__(self, key: Key) -> bool:
        return key in self.t1 or key in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def order(self) -> list[Key]:
        """The order if nothing changed in between: p decides T1 or T2 at every step."""
        t1, t2, out = list(self.t1), list(self.t2), []
        while t1 or t2:
            from_t2 = not t1 or (t2 and len(t1) <= self.p)
            out.append((t2 if from_t2 else t1).pop(0))
        return out


class LFUPolicy(CachePolicy):
    """Least frequently used with dynamic aging (priority = count + age at the last access)."""

    name = "lfu"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.age = 0  # L: the priority of the last victim
        self._count: dict[Key, int] = {}  # known keys (evictable or in use) -> accesses
        self._prio: dict[Key, int] = {}  # evictable key -> its live heap priority
        self._heap: list[tuple[int, int, Key]] = []
        self._pushes = 0
        self._last: tuple[Key, int, int, int, int] | None = None  # key, count, age, heap entry

    def _push(self, key: Key) -> None:
        prio = self._count[key] + self.age
        self._prio[key] = prio
        self._pushes += 1
        heapq.heappush(self._heap, (prio, self._pushes, key))
        if len(self._heap) > 4 * len(self._prio) + 64:
            prios = self._prio
            self._heap = [e for e in self._heap if prios.get(e[2]) == e[0]]
            heapq.heapify(self._heap)

    def add(self, key: Key, now: int = 0) -> None:
        if key in self._prio:
            self.access(key, now)
            return
        self._count.setdefault(key, 1)
        self._push(key)

    def access(self, key: Key, now: int = 0) -> None:
        self._count[key] = self._count.get(key, 0) + 1
        if key in self._prio:
            self._push(key)

    def remove(self, key: Key) -> None:
        self._prio.pop(key, None)

    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        heap, prios = self._heap, self._prio
        while True:
            prio, seq, key = heapq.heappop(heap)
            if prios.get(key) != prio:
                continue
            del prios[key]
            if not alive(key):
                self._count.pop(key, None)
                continue
            self._last = (key, self._count.pop(key), self.age, prio, seq)
            self.age = prio
            return key

    def requeue(self, key: Key, now: int = 0) -> None:
        if self._last is None or self._last[0] != key:
            raise ValueError(f"requeue({key!r}) is not the last victim")
        _, count, age, prio, seq = self._last
        self._last = None
        self.age = age
        self._count[key] = count
        self._prio[key] = prio
        heapq.heappush(self._heap, (prio, seq, key))

    def __contains__(self, key: Key) -> bool:
        return key in self._prio

    def __len__(self) -> int:
        return len(self._prio)

    def order(self) -> list[Key]:
        live = [e for e in self._heap if self._prio.get(e[2]) == e[0]]
        return [key for _, _, key in sorted(live, key=lambda e: e[:2])]


class SLRUPolicy(CachePolicy):
    """Segmented LRU: probationary then protected (``protected_frac`` of the capacity)."""

    name = "slru"
    protected_frac = 0.8

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.probation: OrderedDict[Key, None] = OrderedDict()
        self.protected: OrderedDict[Key, None] = OrderedDict()
        self.protected_cap = max(1, int(capacity * self.protected_frac))
        self._protected_in_use: set[Key] = set()
        self._last: tuple[Key, bool] | None = None

    def _protect(self, key: Key) -> None:
        self.protected[key] = None
        while len(self.protected) > self.protected_cap:
            demoted, _ = self.protected.popitem(last=False)
            self.probation[demoted] = None

    def add(self, key: Key, now: int = 0) -> None:
        if key in self.probation or key in self.protected:
            self.access(key, now)
        elif key in self._protected_in_use:
            self._protected_in_use.discard(key)
            self._protect(key)
        else:
            self.probation[key] = None

    def access(self, key: Key, now: int = 0) -> None:
        if key in self.probation:
            del self.probation[key]
            self._protect(key)
        elif key in self.protected:
            self.protected.move_to_end(key)
        else:
            self._protected_in_use.add(key)

    def remove(self, key: Key) -> None:
        if key in self.protected:
            del self.protected[key]
            self._protected_in_use.add(key)
        else:
            self.probation.pop(key, None)

    def evict(self, alive: Callable[[Key], bool] = _always) -> Key:
        while True:
            from_protected = not self.probation
            key, _ = (self.protected if from_protected else self.probation).popitem(last=False)
            if alive(key):
                self._last = (key, from_protected)
                return key

    def requeue(self, key: Key, now: int = 0) -> None:
        if self._last is None or self._last[0] != key:
            raise ValueError(f"requeue({key!r}) is not the last victim")
        segment = self.protected if self._last[1] else self.probation
        self._last = None
        segment[key] = None
        segment.move_to_end(key, last=False)

    def __contains__(self, key: Key) -> bool:
        return key in self.probation or key in self.protected

    def __len__(self) -> int:
        return len(self.probation) + len(self.protected)

    def order(self) -> list[Key]:
        return list(self.probation) + list(self.protected)


POLICIES: dict[str, type[CachePolicy]] = {
    cls.name: cls for cls in (LRUPolicy, ARCPolicy, LFUPolicy, SLRUPolicy)
}


def make_policy(name: str, capacity: int, monotone: bool = False) -> CachePolicy:
    """The policy ``name`` for a cache of ``capacity`` entries; ValueError naming the allowed ones.
    ``monotone``: the caller's times never decrease, so ``lru`` may keep its order in O(1)."""
    cls = POLICIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown eviction policy {name!r}; allowed: {', '.join(POLICIES)}")
    if monotone and cls is LRUPolicy:
        cls = OrderedLRUPolicy
    return cls(max(1, capacity))
