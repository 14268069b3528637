"""The books of the KV tiers behind the GPU: host memory, then disk (no K/V, only keys and bytes).

A tier stores chunks of ``chunk_blocks`` consecutive GPU blocks of one hashed prefix; a chunk is
known by the chained hash of its LAST GPU block, which names the whole prefix up to it. Each
tier keeps ``key -> bytes`` for the chunks it holds, at most once each, within
``capacity_bytes``; its own ``CachePolicy`` (``allocators.cache_policy``) picks the victim when
a store needs room. Tiers are inclusive: loading a chunk to the GPU keeps the tier's copy.

Writes (``write``):
  * ``through``: every chunk the GPU computes is stored at once in the host tier and, when
    there is one, the disk tier;
  * ``back``: a chunk is stored in the host tier when the GPU evicts it, and in the disk tier
    when the host evicts it.
A chunk larger than a tier is never stored there. Stores are asynchronous in the engines
(vLLM's offloading connector, SGLang's HiCache): their bytes are counted, not timed.

Swap preemption shares the host tier (one pool, one accounting): ``pin_swap(nbytes)`` holds a
preempted sequence's K/V there, evicting cached chunks (which go to disk under write-back) to
make room; pinned bytes are never evicted and leave with ``unpin_swap``. The host tier's bytes
are then ``cached`` (chunks) plus ``swap`` (pinned), within its capacity.

Store order (``store_order``): the chunks one sequence stores (or loads) at once reach the
tiers in prefix order (``head_first``: under LRU a prefix's head is the older, evicted first) or
reversed (``tail_first``: its tail goes first and its head, which every later hit needs, stays;
vLLM's offloading manager ranks a request's chunks so). ``store_many`` and ``load_many`` apply it.

Counters: tokens served per tier (to first admissions, and apart to re-admissions of preempted
sequences: ``hit_tokens``, ``preempted_hit_tokens``), bytes moved per direction, transfers, the host tier's bytes
per category (now and at peak); ``take_loads()`` drains the loads since the last call (the
engine times them per step); ``step_row()`` gives the bytes held per tier and category now and
the bytes moved since its last call (the engine's per-step columns).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from allocators.cache_policy import CachePolicy, make_policy

WRITE_MODES = ("through", "back")
LOAD_MODES = ("blocking", "overlap")
STORE_ORDERS = ("head_first", "tail_first")


@dataclass(slots=True)
class Tier:
    """One tier's books: which chunk keys it holds, their bytes, and its eviction order."""

    name: str
    capacity_bytes: int
    chunk_bytes: int
    policy: CachePolicy
    held: dict[int, int] = field(default_factory=dict)  # chunk key -> bytes
    used_bytes: int = 0  # bytes of the chunks held (cached K/V)
    pinned_bytes: int = 0  # bytes of swapped-out sequences (never evicted)
    evictions: int = 0

    def __contains__(self, key: int) -> bool:
        return key in self.held

    def store(self, key: int, now: int) -> list[int]:
        """Hold ``key`` (a hit if it is held already); returns the keys evicted to make room."""
        if key in self.held:
            self.policy.access(key, now)
            return []
        if self.chunk_bytes > self.capacity_bytes - self.pinned_bytes:
            return []
        evicted = self._make_room(self.chunk_bytes)
        self.held[key] = self.chunk_bytes
        self.used_bytes += self.chunk_bytes
        self.policy.add(key, now)
        return evicted

    def pin(self, nbytes: int) -> list[int] | None:
        """Hold ``nbytes`` that no eviction may take; the evicted chunk keys, or None (nothing
        changed) when the tier cannot hold them even with every chunk evicted."""
        if self.pinned_bytes + nbytes > self.capacity_bytes:
            return None
        evicted = self._make_room(nbytes)
        self.pinned_bytes += nbytes
        return evicted

    def unpin(self, nbytes: int) -> None:
        if nbytes > self.pinned_bytes:
            raise ValueError(f"{self.name}: unpin of {nbytes} bytes, {self.pinned_bytes} pinned")
        self.pinned_bytes -= nbytes

    def _make_room(self, nbytes: int) -> list[int]:
        evicted = []
        while self.used_bytes + self.pinned_bytes + nbytes > self.capacity_bytes:
            victim = self.policy.evict()
            self.used_bytes -= self.held.pop(victim)
            self.evictions += 1
            evicted.append(victim)
        return evicted

    def check_invariants(self) -> None:
        assert self.used_bytes == sum(self.held.values()), f"{self.name}: bytes held do not add up"
        assert self.used_bytes >= 0 and self.pinned_bytes >= 0, f"{self.name}: negative bytes"
        assert self.used_bytes + self.pinned_bytes <= self.capacity_bytes, \
            f"{self.name}: {self.used_bytes} cached + {self.pinned_bytes} pinned bytes, capacity {self.capacity_bytes}"
        assert len(self.policy) == len(self.held) and set(self.policy.order()) == set(self.held), \
            f"{self.name}: the policy and the books disagree"


@dataclass(frozen=True, slots=True)
class TierCopy:
    """A copy the engine's tensors make for the host tier (a backend with real K/V; ``TierStack``
    lists them only after ``track_copies()``): ``store`` GPU ``blocks`` -> host chunk ``key`` (all
    its blocks, read before the step writes anything); ``load`` host chunk ``key`` from its block
    ``offset`` -> GPU ``blocks`` (written before the forward); ``drop``: the host freed ``key``."""

    kind: str  # store | load | drop
    key: int
    blocks: tuple[int, ...] = ()
    offset: int = 0


@dataclass(slots=True)
class Loads:
    """Loads into the GPU since the last drain: bytes and transfers (one per chunk read) per tier."""

    host_bytes: int = 0
    host_transfers: int = 0
    disk_bytes: int = 0
    disk_transfers: int = 0

    def __bool__(self) -> bool:
        return bool(self.host_bytes or self.disk_bytes)


class TierStack:
    """Host tier and optional disk tier behind a GPU prefix cache of ``gpu_block_tokens`` blocks."""

    def __init__(self, *, slot_bytes: int, gpu_block_tokens: int, block_tokens: int, host_bytes: int,
                 disk_bytes: int = 0, host_policy: str = "lru", disk_policy: str = "lru",
                 write: str = "through", store_order: str = "head_first", debug: bool = False) -> None:
        if block_tokens % gpu_block_tokens:
            raise ValueError(f"block_tokens={block_tokens} is not a multiple of the GPU block ({gpu_block_tokens})")
        if write not in WRITE_MODES:
            raise ValueError(f"write must be one of {', '.join(WRITE_MODES)}, got {write!r}")
        if store_order not in STORE_ORDERS:
            raise ValueError(f"store_order must be one of {', '.join(STORE_ORDERS)}, got {store_order!r}")
        self.tail_first = store_order == "tail_first"
        self.slot_bytes = slot_bytes
        self.chunk_blocks = block_tokens // gpu_block_tokens
        self.chunk_tokens = block_tokens
        self.block_bytes = slot_bytes * gpu_block_tokens
        chunk_bytes = slot_bytes * block_tokens
        self.write = write
        self.debug = debug
        self.host = Tier("host", host_bytes, chunk_bytes, make_policy(host_policy, max(1, host_bytes // chunk_bytes), monotone=True))
        self.disk = (Tier("disk", disk_bytes, chunk_bytes, make_policy(disk_policy, max(1, disk_bytes // chunk_bytes), monotone=True))
                     if disk_bytes else None)
        self.clock = 0
        self.loads = Loads()
        self.hit_tokens = {"host": 0, "disk": 0}  # served to first admissions
        self.preempted_hit_tokens = {"host": 0, "disk": 0}  # served to re-admissions after a preemption
        self.bytes_moved = {"gpu_to_host": 0, "host_to_gpu": 0, "host_to_disk": 0, "disk_to_gpu": 0}
        self.peak_host_bytes = {"cached": 0, "swap": 0, "total": 0}
        self._moved_seen = dict(self.bytes_moved)  # bytes_moved at the last step_row()
        self.copies: list[TierCopy] | None = None  # listed for a backend that moves real K/V

    def track_copies(self) -> None:
        """List the host tier's copies (``take_copies``) for a backend that holds real K/V."""
        if self.disk is not None:
            raise ValueError("real K/V copies are kept for a host tier only (no disk tier)")
        self.copies = []

    def take_copies(self) -> list[TierCopy]:
        copies, self.copies = self.copies, ([] if self.copies is not None else None)
        return copies or []

    # -- lookup and load ------------------------------------------------------------------------
    def where(self, key: int) -> str | None:
        """The first tier below the GPU that holds chunk ``key`` (no side effect)."""
        if key in self.host.held:
            return "host"
        if self.disk is not None and key in self.disk.held:
            return "disk"
        return None

    def load(self, key: int, tier: str, blocks: int, gpu_blocks: tuple[int, ...] = (), preempted: bool = False) -> None:
        """``blocks`` GPU blocks of chunk ``key`` come from ``tier`` (an access there): its last
        ``blocks`` blocks, into ``gpu_blocks`` when copies are tracked; ``preempted``: for the
        re-admission of a preempted sequence (its tokens counted apart)."""
        self.clock += 1
        if self.copies is not None:
            self.copies.append(TierCopy("load", key, gpu_blocks, self.chunk_blocks - blocks))
        nbytes = blocks * self.block_bytes
        if tier == "host":
            self.host.policy.access(key, self.clock)
            self.loads.host_bytes += nbytes
            self.loads.host_transfers += 1
            self.bytes_moved["host_to_gpu"] += nbytes
        else:
            self.disk.policy.access(key, self.clock)
            self.loads.disk_bytes += nbytes
            self.loads.disk_transfers += 1
            self.bytes_moved["disk_to_gpu"] += nbytes
        served = self.preempted_hit_tokens if preempted else self.hit_tokens
        served[tier] += blocks * (self.chunk_tokens // self.chunk_blocks)

    def load_many(self, loads: list[tuple[int, str, tuple[int, ...]]], preempted: bool = False) -> None:
        """One admission's chunks found in the tiers, (chunk key, tier, GPU blocks) in prefix
        order: each loaded, then accessed as computed, in the store order."""
        for key, tier, gpu_blocks in (reversed(loads) if self.tail_first else loads):
            self.load(key, tier, len(gpu_blocks), gpu_blocks, preempted)
            self.computed(key)

    def take_loads(self) -> Loads:
        loads, self.loads = self.loads, Loads()
        return loads

    # -- writes -----------------------------------------------------------------------------------
    def computed(self, key: int, gpu_blocks: tuple[int, ...] = ()) -> None:
        """The GPU computed (or loaded) chunk ``key`` (in ``gpu_blocks``): write-through stores it in every tier."""
        if self.write == "through":
            self._store_host(key, gpu_blocks)
            if self.disk is not None and key not in self.disk.held:
                self._store_disk(key)
        if self.debug:
            self.check_invariants()

    def store_many(self, chunks: list[tuple[int, tuple[int, ...]]]) -> None:
        """Chunks one sequence completed at once, (key, GPU blocks) in prefix order, in the store order."""
        for key, gpu_blocks in (reversed(chunks) if self.tail_first else chunks):
            self.computed(key, gpu_blocks)

    def gpu_evicted(self, key: int, gpu_blocks: tuple[int, ...] = ()) -> None:
        """The GPU evicted chunk ``key`` (all its blocks, ``gpu_blocks``, were still cached): write-back stores it."""
        if self.write == "back":
            self._store_host(key, gpu_blocks)
        if self.debug:
            self.check_invariants()

    def _store_host(self, key: int, gpu_blocks: tuple[int, ...] = ()) -> None:
        self.clock += 1
        new = key not in self.host.held
        if new and self.host.chunk_bytes <= self.host.capacity_bytes:
            self.bytes_moved["gpu_to_host"] += self.host.chunk_bytes
        for victim in self.host.store(key, self.clock):
            if self.copies is not None:
                self.copies.append(TierCopy("drop", victim))
            if self.write == "back" and self.disk is not None:
                self._store_disk(victim)
        if new and self.copies is not None and key in self.host.held:
            self.copies.append(TierCopy("store", key, tuple(gpu_blocks)))
        self._note_peak()

    def _store_disk(self, key: int) -> None:
        self.clock += 1
        if key not in self.disk.held and self.disk.chunk_bytes <= self.disk.capacity_bytes:
            self.bytes_moved["host_to_disk"] += self.disk.chunk_bytes
        self.disk.store(key, self.clock)

    # -- swap preemption ------------------------------------------------------------------------
    def pin_swap(self, nbytes: int) -> bool:
        """A preempted sequence's ``nbytes`` of K/V go to the host tier; False (nothing changed)
        when they do not fit there even with every cached chunk evicted."""
        evicted = self.host.pin(nbytes)
        if evicted is None:
            return False
        if self.copies is not None:
            self.copies.extend(TierCopy("drop", victim) for victim in evicted)
        if self.write == "back" and self.disk is not None:
            for victim in evicted:
                self._store_disk(victim)
        self._note_peak()
        if self.debug:
            self.check_invariants()
        return True

    def unpin_swap(self, nbytes: int) -> None:
        """A swapped sequence's ``nbytes`` came back to the GPU (or were dropped)."""
        self.host.unpin(nbytes)

    def host_bytes_by_category(self) -> dict[str, int]:
        """The host tier's bytes now: cached chunks, swapped-out K/V, free."""
        host = self.host
        return {"cached": host.used_bytes, "swap": host.pinned_bytes,
                "free": host.capacity_bytes - host.used_bytes - host.pinned_bytes}

    def step_row(self) -> dict[str, int]:
        """Bytes held now (host: cached chunks and swapped-out K/V; disk: cached chunks) and the
        bytes moved each way since the last call (per-step columns; they sum to the summary's)."""
        moved, seen = self.bytes_moved, self._moved_seen
        row = {"tier_host_cached_bytes": self.host.used_bytes, "tier_host_swap_bytes": self.host.pinned_bytes}
        if self.disk is not None:
            row["tier_disk_cached_bytes"] = self.disk.used_bytes
        for direction, total in moved.items():
            if self.disk is not None or "disk" not in direction:
                row[f"tier_bytes_{direction}"] = total - seen[direction]
        self._moved_seen = dict(moved)
        return row

    def _note_peak(self) -> None:
        peak, host = self.peak_host_bytes, self.host
        peak["cached"] = max(peak["cached"], host.used_bytes)
        peak["swap"] = max(peak["swap"], host.pinned_bytes)
        peak["total"] = max(peak["total"], host.used_bytes + host.pinned_bytes)

    # -- views --------------------------------------------------------------------------------------
    def tiers(self) -> list[Tier]:
        return [self.host] + ([self.disk] if self.disk is not None else [])

    def check_invariants(self) -> None:
        for tier in self.tiers():
            tier.check_invariants()
