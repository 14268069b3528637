"""Prefix caching across the layer groups of a mixed model (``hybrid_prefix``, ``lcm_prefix``).

Hashing: a block of ``block_size`` committed tokens whose ids are known gets the chained hash
``hash((parent, tokens))`` (``parent``: the previous block's hash, ``ROOT_HASH`` for the first),
the same for every group. At ``commit()`` each attention group registers the block it holds
at that index (a window group's block that already left the window is not there to register);
a hash already registered in a group keeps its first block. State groups checkpoint: every
``state_checkpoint_every`` tokens (a multiple of ``block_size``; 0 = never) a sequence takes
one more state block per state group, the state after that many tokens, registered under the
hash of the block that ends there. Checkpoints are memory like any block (counted in the state
group's bytes); one that finds no room is skipped.

Lookup on admit: a hit of ``L`` tokens (``L`` a multiple of ``block_size``, at most the prompt's
full blocks within ``prompt[:-1]``) needs, in every group, what the token at ``L`` reads: a full
group every block before ``L``; a window of ``W`` the blocks of positions ``L + 1 - W`` to
``L - 1``; a chunked group of ``C`` those from ``L // C * C``; a state group a checkpoint at
``L``. The hit is the longest ``L`` every group can serve (a model with state groups and no
checkpoints never hits). A hit shares the needed blocks (reference + 1); a window or chunked
group's earlier entries are ``DROPPED``; each state group takes a fresh block for the
sequence's own state (a copy of the checkpoint). ``prefix_hits`` / ``prefix_queries`` count
tokens: hit tokens over the full-block tokens of ``prompt[:-1]``, of admits that succeed; a
re-admission after a preemption counts apart (``preempted_*``, ``allocators.prefix_stats``).

Free room: a registered block whose last reference goes (a freed sequence, a block leaving
the window, a freed sequence's checkpoints) stays cached, unreferenced, in release order. When
the pool lacks room for an allocation, and evicting every cached block (but those the admit in
progress is about to share) would make it, the oldest cached blocks are evicted (released to
the pool) until it fits; otherwise nothing is evicted and the allocation is refused, so a
refused admit or grow changes nothing. Cached blocks are ``MemoryUsage.cached``.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocators.base import Admission, AllocatorError, Fit, MemoryUsage, ceil_div, check_length
from allocators.grouped import DROPPED, GroupedAllocator, _Seq
from allocators.hybrid import HybridAllocator, LcmAllocator
from allocators.prefix_stats import PrefixLookups

ROOT_HASH = 0x5EED_CAFE


@dataclass(slots=True)
class _Ids:
    token_ids: list[int]  # known ids of positions [0, len): the prompt, then generated
    hashes: list[int]  # chained hash of each full committed block
    checkpoints: list[list[int]]  # per state group: its checkpoint blocks, in position order
    hashable: bool = True


class _EvictingPool:
    """The allocator's pool, whose ``fits`` evicts the oldest cached blocks until a request fits."""

    def __init__(self, pool, owner: PrefixCaching) -> None:
        self._pool = pool
        self._owner = owner
        self.block_bytes = pool.block_bytes

    def fits(self, needs: Mapping[int, int], ever: bool = False) -> bool:
        """As the pool's; evicts only when evicting every evictable block would make room."""
        pool = self._pool
        if ever or pool.fits(needs):
            return pool.fits(needs, ever=ever)
        if not pool.fits_with(needs, self._owner._evictable()):
            return False
        while not pool.fits(needs):
            if not self._owner._evict_one():
                return False
        return True

    def take(self, group: int) -> int:
        return self._pool.take(group)

    def release(self, group: int, blocks: list[int]) -> None:
        self._pool.release(group, blocks)

    def free_bytes(self) -> int:
        return self._pool.free_bytes()

    def __getattr__(self, name):  # the pool's own fields (page sizes, large pages) for tests
        return getattr(self._pool, name)


class PrefixCaching(GroupedAllocator):
    """Prefix caching over any grouped pool (mixed in before a strategy class)."""

    def __init__(self, num_slots: int, block_size: int = 16, groups=None, slot_bytes: int | None = None,
                 state_checkpoint_every: int = 0, prefill_chunk: int = 2048, debug: bool = False) -> None:
        self.checkpoint_every = check_length("state_checkpoint_every", state_checkpoint_every)
        self._cached: OrderedDict[tuple[int, int], None] = OrderedDict()  # (group, block), oldest first
        self._pinned: set[tuple[int, int]] = set()
        self._ids: dict[int, _Ids] = {}
        self._uncommitted: set[int] = set()
        # queries: full-block tokens of prompt[:-1], what could hit; query_tokens: len(prompt) - 1
        self._lookups = PrefixLookups()
        self._evictions = 0
        super().__init__(num_slots, block_size, groups, slot_bytes, prefill_chunk, debug)
        if self.checkpoint_every % self.block_size:
            raise AllocatorError(f"state_checkpoint_every={self.checkpoint_every} must be a multiple of "
                                 f"block_size={self.block_size}")
        n = len(self.groups)
        self._index: list[dict[int, int]] = [{} for _ in range(n)]  # per group: hash -> block
        self._hash_of: list[dict[int, int]] = [{} for _ in range(n)]  # per group: registered block -> hash
        self._key_of: list[dict[int, tuple]] = [{} for _ in range(n)]  # per group: block -> (parent, tokens)
        self.pool = _EvictingPool(self.pool, self)

    # -- the cache -------------------------------------------------------------------------------
    def _evictable(self) -> dict[int, list[int]]:
        """Cached blocks an eviction may take now (group -> blocks): all but the pinned."""
        out: dict[int, list[int]] = {}
        for entry in self._cached:
            if entry not in self._pinned:
                out.setdefault(entry[0], []).append(entry[1])
        return out

    def _evict_one(self) -> bool:
        for entry in self._cached:
            if entry not in self._pinned:
                break
        else:
            return False
        del self._cached[entry]
        g, block = entry
        self._unregister(g, block)
        self.pool.release(g, [block])
        self._evictions += 1
        return True

    def _unregister(self, g: int, block: int) -> None:
        h = self._hash_of[g].pop(block)
        del self._key_of[g][block], self._index[g][h]

    def _register(self, g: int, block: int, h: int, key: tuple) -> None:
        if h in self._index[g] or block in self._hash_of[g]:
            return
        self._index[g][h] = block
        self._hash_of[g][block] = h
        self._key_of[g][block] = key

    def _unref(self, group: int, blocks: Sequence[int]) -> list[int]:
        """As the base's, but a registered block whose last reference goes stays cached."""
        ref, released, hashed = self._ref[group], [], self._hash_of[group]
        for b in blocks:
            ref[b] -= 1
            if not ref[b]:
                del ref[b]
                if b in hashed:
                    self._cached[(group, b)] = None
                else:
                    released.append(b)
        self.pool.release(group, released)
        return released

    def _share(self, g: int, block: int) -> None:
        ref = self._ref[g]
        if block in ref:
            ref[block] += 1
        else:
            del self._cached[(g, block)]
            ref[block] = 1

    def _cached_bytes(self) -> int:
        return sum(self.pool.block_bytes[g] for g, _ in self._cached)

    # -- lookup ----------------------------------------------------------------------------------
    def _lookup(self, g: int, h: int, key: tuple) -> int | None:
        block = self._index[g].get(h)
        return block if block is not None and self._key_of[g][block] == key else None

    def _hit(self, prompt: Sequence[int]) -> tuple[int, list[list[int]], list[int]]:
        """The longest hit: (tokens, per attention group the needed blocks from its first needed
        index, that first index per group)."""
        bs = self.block_size
        hashes, keys, parent = [], [], ROOT_HASH
        for i in range((len(prompt) - 1) // bs if prompt else 0):
            key = (parent, tuple(prompt[i * bs:(i + 1) * bs]))
            parent = hash(key)
            hashes.append(parent)
            keys.append(key)
        for k in range(len(hashes), 0, -1):
            end = k * bs
            firsts, shared = [], []
            for g, spec in enumerate(self.attention):
                first = 0 if spec.kind == "full" else (
                    max(end + 1 - spec.size, 0) // bs if spec.kind == "window" else end // spec.size * spec.size // bs)
                blocks = [self._lookup(g, hashes[i], keys[i]) for i in range(first, k)]
                if None in blocks:
                    break
                firsts.append(first)
                shared.append(blocks)
            else:
                if all(self._lookup(self._state_index(i), hashes[k - 1], keys[k - 1]) is not None
                       for i in range(len(self.state))) and (not self.state or end % max(self.checkpoint_every, 1) == 0):
                    return end, shared, firsts
        return 0, [], []

    def cached_prefix_len(self, tokens: Sequence[int]) -> int:
        return self._hit(tokens)[0]

    # -- lifecycle -------------------------------------------------------------------------------
    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        hit, shared, firsts = self._hit(prompt) if seq_id not in self._seqs and len(prompt) <= max_len else (0, [], [])
        if not hit:
            admission = super().admit(seq_id, prompt, max_len, final_len)
            if admission.ok:
                self._admitted(seq_id, prompt, 0)
            return admission
        check_length("max_len", max_len, 1)
        bs, k = self.block_size, hit // self.block_size
        needs: dict[int, int] = {}
        for g, spec in enumerate(self.attention):
            stop = len(prompt) if spec.kind == "full" else min(len(prompt), hit + spec.size + self.prefill_chunk)
            needs[g] = max(ceil_div(stop, bs) - k, 0)
        needs.update({self._state_index(i): 1 for i in range(len(self.state))})
        pins = {(g, b) for g, blocks in enumerate(shared) for b in blocks}
        self._pinned = pins
        try:
            fits = self.pool.fits(needs)
        finally:
            self._pinned = set()
        if not fits:
            return Admission(Fit.LATER, f"prompt needs {sum(needs.values())} more blocks after a {hit}-token hit; "
                                        "not free now")
        tables, dropped = [], []
        for g, blocks in enumerate(shared):
            for b in blocks:
                self._share(g, b)
            tables.append([DROPPED] * firsts[g] + blocks + self._take(g, needs[g]))
            dropped.append(firsts[g])
        states = [self._take(self._state_index(i), 1)[0] for i in range(len(self.state))]
        self._seqs[seq_id] = _Seq(tables, dropped, states, hit, len(prompt), max_len)
        self._admitted(seq_id, prompt, hit)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK, num_cached_tokens=hit)

    def _admitted(self, seq_id: int, prompt: Sequence[int], hit: int) -> None:
        bs = self.block_size
        ids = _Ids(list(prompt), [], [[] for _ in self.state])
        parent = ROOT_HASH
        for i in range(hit // bs):
            parent = hash((parent, tuple(prompt[i * bs:(i + 1) * bs])))
            ids.hashes.append(parent)
        self._ids[seq_id] = ids
        self._lookups.record(seq_id, queries=(len(prompt) - 1) // bs * bs if prompt else 0, hits=hit,
                             query_tokens=max(len(prompt) - 1, 0), hit_tokens=hit)

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        slots = super().grow(seq_id, num_tokens, token_ids)
        if slots:
            ids, end = self._ids[seq_id], self._seqs[seq_id].num_tokens
            if ids.hashable and end > len(ids.token_ids):
                if token_ids is None:
                    ids.hashable = False
                else:
                    ids.token_ids.extend(token_ids[len(ids.token_ids) - end:])
            self._uncommitted.add(seq_id)
        return slots

    def commit(self) -> None:
        """Register the full blocks computed since the last commit; take the checkpoints they reach."""
        bs = self.block_size
        for seq_id in sorted(self._uncommitted):
            seq, ids = self._seqs.get(seq_id), self._ids.get(seq_id)
            if seq is None or not ids.hashable:
                continue
            full = min(seq.num_tokens, len(ids.token_ids)) // bs
            while len(ids.hashes) < full:
                i = len(ids.hashes)
                key = (ids.hashes[-1] if ids.hashes else ROOT_HASH, tuple(ids.token_ids[i * bs:(i + 1) * bs]))
                h = hash(key)
                ids.hashes.append(h)
                for g, table in enumerate(seq.tables):
                    if i >= seq.dropped[g]:
                        self._register(g, table[i], h, key)
                if self.state and self.checkpoint_every and (i + 1) * bs % self.checkpoint_every == 0:
                    self._checkpoint(ids, h, key)
        self._uncommitted.clear()
        if self.debug:
            self.check_invariants()

    def _checkpoint(self, ids: _Ids, h: int, key: tuple) -> None:
        needs = {self._state_index(i): 1 for i in range(len(self.state))}
        if not self.pool.fits(needs):
            return  # no room: this position gets no checkpoint
        for i in range(len(self.state)):
            g = self._state_index(i)
            block = self._take(g, 1)[0]
            ids.checkpoints[i].append(block)
            self._register(g, block, h, key)

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        if not super().fork(parent_id, child_id, final_len):
            return False
        parent = self._ids[parent_id]
        self._ids[child_id] = _Ids(list(parent.token_ids), list(parent.hashes), [[] for _ in self.state],
                                   parent.hashable)
        return True

    def note_preempted(self, seq_id: int) -> None:
        self._lookups.note_preempted(seq_id)

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        ids = self._ids.pop(seq_id)
        self._uncommitted.discard(seq_id)
        for i, blocks in enumerate(ids.checkpoints):
            self._unref(self._state_index(i), blocks[::-1])

    # -- views -----------------------------------------------------------------------------------
    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        u = super().usage(final_lens)
        cached = self._cached_bytes() // self.unit_bytes
        return MemoryUsage(u.token, u.reserved, u.internal, u.external - cached, cached, u.token_slots, u.groups)

    def _other_owned(self) -> list[tuple[int, int]]:
        return [(self._state_index(i), b) for ids in self._ids.values()
                for i, blocks in enumerate(ids.checkpoints) for b in blocks]

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        out.update(self._lookups.stats())
        out["cached_free_blocks"] = len(self._cached)
        out["evictions"] = self._evictions
        return out

    def check_invariants(self) -> None:
        super().check_invariants()
        for g, block in self._cached:
            assert block not in self._ref[g], f"group {g}: cached block {block} is referenced"
            assert block in self._hash_of[g], f"group {g}: cached block {block} is not registered"
        for g in range(len(self.groups)):
            assert {b: h for h, b in self._index[g].items()} == self._hash_of[g], f"group {g}: index and hashes differ"
            for block in self._hash_of[g]:
                assert block in self._ref[g] or (g, block) in self._cached, f"group {g}: registered block {block} lost"


class HybridPrefixAllocator(PrefixCaching, HybridAllocator):
    """``hybrid`` (one shared pool, one page size) with prefix caching across groups."""

    name = "hybrid_prefix"


class LcmPrefixAllocator(PrefixCaching, LcmAllocator):
    """``lcm`` (Jenga's two-level pages) with prefix caching across groups."""

    name = "lcm_prefix"
