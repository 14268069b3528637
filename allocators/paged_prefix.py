"""Paged allocation plus prefix sharing: hash-chained full blocks, LRU reuse of cached blocks.

Hashing: when a sequence's block is full of committed tokens (grown, then ``commit()``: the
engine commits once the step that writes their K/V has run) whose ids are known, it gets
the chained hash ``_hash_block(parent, tokens)`` where ``parent`` is the hash of the previous
block (``ROOT_HASH`` for the first) and ``tokens`` the block's token ids as a tuple. The block
is registered in the hash -> block map unless that hash is already taken (a duplicate
computed concurrently stays private). Prompt ids are known from ``admit``; later ids come
from ``grow(token_ids=...)``. A grow of tokens past the prompt with ``token_ids=None`` makes
that block and every later block of the sequence unhashable. A block grown but not committed
is never hashed, so a sequence freed before the commit (a roll-back) leaves nothing cached.

Lookup on admit: the prompt's full blocks within ``prompt[:-1]`` (the last prompt token is
always computed, so a prompt of P tokens queries ``(P - 1) // block_size`` blocks) are looked
up in order until the first miss. A hit must match the stored parent hash and token tuple
(a hash collision is a miss). Hits are shared (ref + 1) and reported as
``num_cached_tokens = hits * block_size``. Only admits that succeed count towards
``prefix_queries`` / ``prefix_hits`` (a refused admit changes nothing, counters included); the
re-admission of a sequence preempted before (``note_preempted``) counts apart, in
``preempted_queries`` / ``preempted_hits``, tier hits included (``allocators.prefix_stats``).

Free room: unhashed free blocks (a deque) and cached blocks (hashed, unreferenced, ordered by
the ``eviction`` policy of ``allocators.cache_policy``, keyed by hash). Allocation takes an
unhashed block first, else evicts the policy's victim. ``free`` drops one reference per block,
walking the table from its tail; a block whose last reference goes is
  * hashed: added to the policy at the time of the release (a counter), still findable by its
    hash until it is evicted;
  * not hashed: put at the FRONT of the deque (it caches nothing, so it is reused first).
A hit on a cached block is an access and takes it out of the policy; a hit on a live block
is an access. With ``eviction=lru`` cached blocks are evicted least recently freed first, and
within one freed sequence tail blocks first; unhashed blocks of one free are also reused tail
first. Taking a cached block evicts it: its hash leaves the map.

Tiers (``attach_tiers``, ``allocators.tiers``): past the GPU hits, the lookup goes on chunk by
chunk (``chunk_blocks`` GPU blocks, keyed by the hash of the chunk's last block) in the host,
then the disk tier, until a chunk is in neither or ends past ``prompt[:-1]``. A chunk found
there is loaded, not recomputed: its missing blocks take fresh GPU blocks, are hashed at once
and count in ``num_cached_tokens``. Write-through stores each chunk the GPU completes; write-back
stores a chunk when the GPU evicts its last block while the chunk's other blocks are cached.
The chunks one commit completes for a sequence, and those one admit loads, reach the tiers in
their ``store_order`` (head first, or tail first).

Usage: cached free blocks are not allocated; they are their own category
(``MemoryUsage.cached``), external in the paper's four-way view.

Invariants (on top of paged's): the map and the blocks' hashes agree one to one; a hashed
block is full for each of its owners; a sequence's hash chain covers exactly its full
committed blocks while its token ids are known (never more than its full blocks).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from allocators.base import Admission, AllocatorError, Fit, MemoryUsage, ceil_div
from allocators.cache_policy import CachePolicy, make_policy
from allocators.paged import PagedAllocator, _PagedSeq
from allocators.prefix_stats import LookupCounts, PrefixLookups
from allocators.run_sums import RunSums
from allocators.tiers import TierStack

ROOT_HASH = 0x5EED_CAFE  # parent hash of a sequence's first block


@dataclass(slots=True)
class _PrefixSeq(_PagedSeq):
    token_ids: list[int]  # known ids of positions [0, len(token_ids)): the prompt, then generated
    hashes: list[int]  # chained hash of each full computed block, in order
    hashable: bool  # False once a computed token's id is unknown


class _PrefixRoom:
    """Blocks an allocation can take: unhashed free ones (reused first), then cached ones in
    the policy's order (their keys are hashes; ``block_of`` maps them back)."""

    __slots__ = ("fresh", "policy", "block_of")

    def __init__(self, num_blocks: int, policy: CachePolicy, block_of: dict[int, int]) -> None:
        self.fresh: deque[int] = deque(range(num_blocks))
        self.policy = policy
        self.block_of = block_of

    def __len__(self) -> int:
        return len(self.fresh) + len(self.policy)

    def __iter__(self) -> Iterator[int]:
        yield from self.fresh
        for h in self.policy.order():
            yield self.block_of[h]


def eviction_policy(name: str, capacity: int, monotone: bool = False) -> CachePolicy:
    """The GPU prefix cache's policy; AllocatorError naming the allowed ones."""
    try:
        return make_policy(name, capacity, monotone)
    except ValueError as e:
        raise AllocatorError(f"eviction: {e}") from None


def tier_rates(prefix: str, counts: LookupCounts, tier_tokens: dict[str, int], disk: bool) -> dict[str, float | None]:
    """``{prefix}_{gpu,host,disk,total}``: tokens each tier served over the prompt tokens (bar the
    last) of the admissions ``counts`` holds; disk None without a disk tier."""
    q = counts.query_tokens
    rate = (lambda n: n / q if q else None)
    host, disk_tokens = tier_tokens["host"], tier_tokens["disk"]
    return {f"{prefix}_gpu": rate(counts.hit_tokens), f"{prefix}_host": rate(host),
            f"{prefix}_disk": rate(disk_tokens) if disk else None,
            f"{prefix}_total": rate(counts.hit_tokens + host + disk_tokens)}


class PagedPrefixAllocator(PagedAllocator):
    """``paged`` plus prefix caching; see the module docstring for hashing and eviction order."""

    name = "paged_prefix"

    def __init__(self, num_slots: int, block_size: int = 16, eviction: str = "lru", debug: bool = False) -> None:
        self.eviction = eviction
        self._hash_to_block: dict[int, int] = {}
        self._policy = eviction_policy(eviction, max(1, num_slots // max(1, block_size)), monotone=True)
        self._release_clock = 0
        super().__init__(num_slots, block_size, debug)
        self._block_hash: list[int | None] = [None] * self.num_blocks
        self._block_key: list[tuple[int, tuple[int, ...]] | None] = [None] * self.num_blocks
        self._uncommitted: set[int] = set()  # sequences grown since the last commit
        self._lookups = PrefixLookups()
        self._evictions = 0
        self._num_cached = 0  # hashed blocks in the free queue
        self._tiers: TierStack | None = None
        self._block_pos: list[int] = [0] * self.num_blocks  # a hashed block's index in its prefix

    @staticmethod
    def _hash_block(parent: int, tokens: tuple[int, ...]) -> int:
        return hash((parent, tokens))

    # -- free room ------------------------------------------------------------------------
    def _init_free_list(self) -> None:
        self._free = _PrefixRoom(self.num_blocks, self._policy, self._hash_to_block)  # type: ignore[assignment]

    def _take_block(self) -> int:
        room = self._free
        if room.fresh:
            return room.fresh.popleft()
        h = self._policy.evict()
        block = self._hash_to_block.pop(h)
        self._evicted(block, h, self._block_key[block])
        self._block_hash[block] = None
        self._block_key[block] = None
        self._evictions += 1
        self._num_cached -= 1
        return block

    def _evicted(self, block: int, h: int, key: tuple[int, tuple[int, ...]] | None) -> None:
        """The cached block ``block`` (hash ``h``) is about to lose its K/V: write-back stores its
        chunk when it ends one and the chunk's other blocks are still cached."""
        tiers = self._tiers
        if tiers is None or tiers.write != "back" or (self._block_pos[block] + 1) % tiers.chunk_blocks:
            return
        parent = key[0]
        blocks = [block]
        for _ in range(tiers.chunk_blocks - 1):
            b = self._hash_to_block.get(parent)
            if b is None:
                return
            blocks.append(b)
            parent = self._block_key[b][0]
        tiers.gpu_evicted(h, tuple(reversed(blocks)))

    def attach_tiers(self, tiers: TierStack) -> None:
        """Put the host (and disk) tiers behind this GPU prefix cache (before the first admit)."""
        if self._seqs or self._lookups.first.requests or self._lookups.preempted.requests:
            raise AllocatorError("attach_tiers before the first admit")
        self._tiers = tiers

    def take_tier_copies(self):
        """The host tier's copies since the last call (``allocators.tiers.TierCopy``; after
        ``TierStack.track_copies``), in the order they happened."""
        return [] if self._tiers is None else self._tiers.take_copies()

    def take_tier_loads(self):
        """Loads from the tiers since the last call (``allocators.tiers.Loads``), or None without tiers."""
        return None if self._tiers is None else self._tiers.take_loads()

    def _tier_hits(self, prompt: Sequence[int], start: int, parent: int,
                   queries: int) -> list[tuple[int, tuple[int, tuple[int, ...]], str, int]]:
        """Blocks ``start``.. of the prompt found chunk by chunk in the tiers: (hash, key, tier, chunk key)."""
        tiers, bs = self._tiers, self.block_size
        k = tiers.chunk_blocks
        found: list[tuple[int, tuple[int, tuple[int, ...]], str, int]] = []
        i = start
        while i < queries:
            end = (i // k + 1) * k  # blocks [i, end) complete the chunk
            if end > queries:
                break
            chunk: list[tuple[int, tuple[int, tuple[int, ...]]]] = []
            for j in range(i, end):
                key = (parent, tuple(prompt[j * bs:(j + 1) * bs]))
                parent = self._hash_block(*key)
                chunk.append((parent, key))
            where = tiers.where(parent)
            if where is None:
                break
            found.extend((h, key, where, parent) for h, key in chunk)
            i = end
        return found

    def _release_blocks(self, blocks: list[int]) -> None:
        policy = self._policy
        fresh = self._free.fresh
        unhashed = []
        for b in blocks:
            h = self._block_hash[b]
            if h is None:
                unhashed.append(b)
            else:
                self._release_clock += 1
                policy.add(h, self._release_clock)
                self._num_cached += 1
        fresh.extendleft(reversed(unhashed))  # the first released ends up first

    def _lookup(self, prompt: Sequence[int]) -> tuple[list[int], list[int], int]:
        """The prompt's leading full blocks (within ``prompt[:-1]``) the cache holds: their
        blocks, their hashes and the hash of the last (``ROOT_HASH`` for none)."""
        bs = self.block_size
        hits: list[int] = []
        hashes: list[int] = []
        parent = ROOT_HASH
        for i in range((len(prompt) - 1) // bs if prompt else 0):
            key = (parent, tuple(prompt[i * bs : (i + 1) * bs]))
            h = self._hash_block(*key)
            block = self._hash_to_block.get(h)
            if block is None or self._block_key[block] != key:
                break
            hits.append(block)
            hashes.append(h)
            parent = h
        return hits, hashes, parent

    def cached_prefix_len(self, tokens: Sequence[int]) -> int:
        """Leading tokens of ``tokens`` whose full blocks the cache holds now (as admit would hit)."""
        return len(self._lookup(tokens)[0]) * self.block_size

    # -- lifecycle -------------------------------------------------------------------------
    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        refusal = self._refuse(seq_id, prompt, max_len, final_len)
        if refusal is not None:
            return refusal
        bs = self.block_size
        queries = (len(prompt) - 1) // bs if prompt else 0
        hits, hashes, parent = self._lookup(prompt)
        needed = self._blocks_needed(prompt, hits)
        if needed > len(self._free):
            return Admission(Fit.LATER, f"prompt needs {needed} free blocks; {len(self._free)} free")
        fresh = ceil_div(len(prompt), bs) - len(hits)
        ref = self._ref
        policy = self._policy
        for b, h in zip(hits, hashes):
            if not ref[b]:
                policy.remove(h)  # taken into use, then accessed: in use, the policy remembers the hit
                self._num_cached -= 1
            policy.access(h, self._release_clock)
            ref[b] += 1
        table = hits + self._take_fresh(fresh)
        # the tiers are looked up after the fresh blocks are taken: a write-back store of a block
        # those evicted may push a chunk out of the host tier, which must not count as a hit
        loaded = self._tier_hits(prompt, len(hits), parent, queries) if self._tiers is not None else ()
        preempted = seq_id in self._lookups.preempted_ids
        if loaded:
            self._register_loaded(table, len(hits), loaded, hashes, preempted)
        cached = (len(hits) + len(loaded)) * bs
        self._seqs[seq_id] = _PrefixSeq(table, cached, len(prompt), max_len, list(prompt), hashes, True)
        self._lookups.record(seq_id, queries=queries, hits=len(hits), query_tokens=max(len(prompt) - 1, 0),
                             hit_tokens=len(hits) * bs)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK, num_cached_tokens=cached)

    def _register_loaded(self, table: list[int], start: int, loaded, hashes: list[int], preempted: bool) -> None:
        """Book the chunks loaded from the tiers into the fresh blocks ``table[start:]``."""
        tiers = self._tiers
        counts: dict[tuple[int, str], list[int]] = {}
        for i, (h, key, where, chunk) in enumerate(loaded, start):
            block = table[i]
            hashes.append(h)
            counts.setdefault((chunk, where), []).append(block)
            if h not in self._hash_to_block:
                self._hash_to_block[h] = block
                self._block_hash[block] = h
                self._block_key[block] = key
                self._block_pos[block] = i
        tiers.load_many([(chunk, where, tuple(blocks)) for (chunk, where), blocks in counts.items()], preempted)

    _tracks_ids = True

    def _note_ids(self, seq_id: int, seq: _PrefixSeq,  # type: ignore[override]
                   token_ids: Sequence[int] | None) -> None:
        """Remember the new token ids; their blocks are hashed at the next commit."""
        if not seq.hashable:
            return
        known = seq.token_ids
        end = seq.num_tokens
        if end > len(known):
            if token_ids is None:
                seq.hashable = False
                return
            known.extend(token_ids[len(known) - end :])
        if end >> self._shift > len(seq.hashes):
            self._uncommitted.add(seq_id)

    def grow_many(self, grows: Sequence[tuple[int, Sequence[int]]]) -> list[list[int]]:
        """As paged's, with ``_note_ids`` of each one-token grow done inline, in the same order
        (the commit hashes the sequences in the order they were first noted)."""
        if self.debug or type(self).grow is not PagedAllocator.grow:
            return super().grow_many(grows)
        seqs, ref, free, uncommitted = self._seqs, self._ref, self._free, self._uncommitted
        shift, mask = self._shift, self._mask
        out = []
        for seq_id, token_ids in grows:
            seq = seqs.get(seq_id)
            if seq is None or len(token_ids) != 1 or seq.num_tokens >= seq.max_len:
                slots = self.grow(seq_id, len(token_ids), token_ids)  # raises, or the general case
                if slots is None:
                    break
                out.append(slots)
                continue
            t = seq.num_tokens
            table = seq.table
            index = t >> shift
            if index < len(table):
                block = table[index]
                if ref[block] > 1:
                    slots = self.grow(seq_id, 1, token_ids)  # copy-on-write
                    if slots is None:
                        break
                    out.append(slots)
                    continue
            else:
                if not free:
                    break
                block = self._take_block()
                ref[block] = 1
                table.append(block)
            end = seq.num_tokens = t + 1
            if seq.hashable:  # _note_ids
                known = seq.token_ids
                held = len(known)
                if end == held + 1:  # the usual case: the one new id is unknown yet
                    known.append(token_ids[0])
                elif end > held:
                    known.extend(token_ids[held - end:])
                if end >> shift > len(seq.hashes):
                    uncommitted.add(seq_id)
            out.append([(block << shift) | (t & mask)])
        return out

    def commit(self) -> None:
        """Hash and register the full blocks grown since the last commit."""
        for seq_id in self._uncommitted:
            seq = self._seqs.get(seq_id)
            if seq is not None:
                self._hash_full_blocks(seq)
        self._uncommitted.clear()
        if self.debug:
            self.check_invariants()

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        """As paged; a child of a parent grown since the last commit is hashed at that commit too."""
        inherits = parent_id in self._uncommitted and child_id not in self._seqs
        if inherits:
            self._uncommitted.add(child_id)  # before the fork's own invariant check
        try:
            return super().fork(parent_id, child_id, final_len)
        except Exception:
            if inherits:
                self._uncommitted.discard(child_id)
            raise

    def free(self, seq_id: int) -> None:
        self._uncommitted.discard(seq_id)
        super().free(seq_id)

    def note_preempted(self, seq_id: int) -> None:
        self._lookups.note_preempted(seq_id)

    def _hash_full_blocks(self, seq: _PrefixSeq) -> None:
        """Hash the sequence's newly full blocks whose ids are known and register those whose
        hash is new."""
        bs = self.block_size
        hashes, known = seq.hashes, seq.token_ids
        tiers = self._tiers
        stores: list[tuple[int, tuple[int, ...]]] = []  # chunks completed now, for the tiers
        for i in range(len(hashes), min(seq.num_tokens, len(known)) >> self._shift):
            key = (hashes[-1] if hashes else ROOT_HASH, tuple(known[i * bs : (i + 1) * bs]))
            h = self._hash_block(*key)
            hashes.append(h)
            block = seq.table[i]
            if h not in self._hash_to_block and self._block_hash[block] is None:
                self._hash_to_block[h] = block
                self._block_hash[block] = h
                self._block_key[block] = key
                self._block_pos[block] = i
            if tiers is not None and not (i + 1) % tiers.chunk_blocks:
                stores.append((h, tuple(seq.table[i + 1 - tiers.chunk_blocks:i + 1])))
        if stores:
            tiers.store_many(stores)

    # -- decode runs (kvbench.engine.decode_run): many rounds of one-token grows at once -------
    def decode_run_ready(self, num_running: int) -> bool:
        """As paged's, with no tiers and nothing left to commit; shared blocks may be (prefix
        hits: full, never grown into) but every partial block is private, and every hashable
        sequence's full blocks are hashed (a round's commit then hashes the blocks it fills)."""
        if self._tiers is not None or self._uncommitted or len(self._seqs) != num_running \
                or not self._partials_private():
            return False
        shift = self._shift
        return all([len(s.hashes) == s.num_tokens >> shift for s in self._seqs.values() if s.hashable])

    def _cache_room(self) -> tuple[int, int]:
        return self._num_cached, len(self._free.fresh)

    def admit_waits(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None,
                    taken: int) -> bool:
        """Whether ``admit`` would answer LATER, changing nothing, after ``taken`` more blocks go
        (a grow that evicts one of the prompt's hits only raises what it needs)."""
        return self._refuse(seq_id, prompt, max_len, final_len) is None \
            and self._blocks_needed(prompt, self._lookup(prompt)[0]) > len(self._free) - taken

    def grow_decode_run(self, run: RunSums, steps: int, token_ids: Sequence[Sequence[int]]) -> None:
        """As paged's, round by round: each round's grows, then its commit (the sequences that
        filled a block, hashed in the order the general path's set of them gives)."""
        mask, seq_ids, tokens = self._mask, run.seq_ids, run.tokens_now()
        seqs = [self._seqs[seq_id] for seq_id in seq_ids]
        by_phase: list[list[tuple[int, _PrefixSeq, int]]] = [[] for _ in range(self.block_size)]
        for seq_id, seq, nt, ids in zip(seq_ids, seqs, tokens, token_ids):
            by_phase[nt & mask].append((seq_id, seq, nt))
            if seq.hashable and nt + steps > len(seq.token_ids):
                seq.token_ids.extend(ids[len(seq.token_ids):nt + steps])
        ref = self._ref
        for j in range(steps):
            for _, seq, _ in by_phase[-j & mask]:
                block = self._take_block()
                ref[block] = 1
                seq.table.append(block)
            filled = by_phase[(-j - 1) & mask]
            if not filled:
                continue
            noted: set[int] = set()  # commit() walks the set grow_many noted them in, added one by one
            at = {}
            for seq_id, seq, nt in filled:
                if seq.hashable:
                    noted.add(seq_id)
                    at[seq_id] = seq, nt + j + 1
            for seq_id in noted:
                seq, end = at[seq_id]
                seq.num_tokens = end
                self._hash_full_blocks(seq)
        for seq, nt in zip(seqs, tokens):
            seq.num_tokens = nt + steps

    def _child_of(self, parent: _PagedSeq) -> _PagedSeq:
        assert isinstance(parent, _PrefixSeq)
        # the child shares the parent's computed tokens only: ids past them are the parent's future
        return _PrefixSeq(
            list(parent.table), parent.num_tokens, parent.prompt_len, parent.max_len,
            parent.token_ids[:parent.num_tokens], list(parent.hashes), parent.hashable,
        )

    # -- views -------------------------------------------------------------------------------
    def cached_blocks(self) -> list[int]:
        """Free blocks still findable by hash, in eviction order."""
        return [self._hash_to_block[h] for h in self._policy.order()]

    def _usage(self, partial: int, filled: int, reserved: int, internal: int) -> MemoryUsage:
        u = super()._usage(partial, filled, reserved, internal)
        cached = self._num_cached * self.block_size
        return MemoryUsage(u.token, u.reserved, u.internal, u.external - cached, cached)

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        out.update(self._lookups.stats())
        out["cached_free_blocks"] = self._num_cached
        out["evictions"] = self._evictions
        if self._tiers is not None:
            out.update(self._tier_stats())
        return out

    def _tier_stats(self) -> dict[str, float | int | None]:
        """Token hit rates per tier and in total (over prompt tokens bar the last) of first
        admissions (``tier_hit_rate_*``) and of re-admissions after a preemption
        (``preempted_tier_hit_rate_*``), bytes moved."""
        tiers = self._tiers
        out: dict[str, float | int | None] = {
            **tier_rates("tier_hit_rate", self._lookups.first, tiers.hit_tokens, tiers.disk is not None),
            **tier_rates("preempted_tier_hit_rate", self._lookups.preempted, tiers.preempted_hit_tokens,
                         tiers.disk is not None),
            # every load saved its recompute, a re-admission's too
            "tier_recompute_tokens_saved": sum(tiers.hit_tokens.values()) + sum(tiers.preempted_hit_tokens.values()),
            "tier_host_evictions": tiers.host.evictions,
            "tier_host_used_bytes": tiers.host.used_bytes,  # held at the end of the run
            "tier_disk_used_bytes": tiers.disk.used_bytes if tiers.disk is not None else None,
            "tier_disk_evictions": tiers.disk.evictions if tiers.disk is not None else None,
        }
        for direction, nbytes in tiers.bytes_moved.items():
            out[f"tier_bytes_{direction}"] = nbytes if tiers.disk is not None or "disk" not in direction else None
        return out

    def check_invariants(self) -> None:
        super().check_invariants()
        assert self._num_cached == len(self.cached_blocks()) == len(self._policy), "cached block count is wrong"
        for h in self._policy.order():
            b = self._hash_to_block.get(h)
            assert b is not None and not self._ref[b], f"policy holds hash {h}: not a cached free block"
        assert not any(self._block_hash[b] is not None for b in self._free.fresh), "a hashed block in the fresh deque"
        if self._tiers is not None:
            self._tiers.check_invariants()
        for h, b in self._hash_to_block.items():
            assert self._block_hash[b] == h, f"map says hash {h} -> block {b}; block says {self._block_hash[b]}"
        bs = self.block_size
        for b, h in enumerate(self._block_hash):
            assert (h is None) == (self._block_key[b] is None), f"block {b}: hash and key disagree"
            if h is not None:
                assert self._hash_to_block.get(h) == b, f"hashed block {b} not in the map"
        for seq_id, seq in self._seqs.items():
            assert isinstance(seq, _PrefixSeq)
            full = seq.num_tokens // bs
            if seq.hashable and seq_id not in self._uncommitted:
                assert len(seq.hashes) == full, f"seq {seq_id}: {len(seq.hashes)} hashes for {full} full blocks"
            assert len(seq.hashes) <= full, f"seq {seq_id}: hashes past its full blocks"
            for i, b in enumerate(seq.table):
                h = self._block_hash[b]
                if h is not None:
                    assert i < full, f"seq {seq_id}: hashed block {b} at index {i} is not full"
                    assert i < len(seq.hashes) and seq.hashes[i] == h, f"seq {seq_id}: block {b} hashed differently"
