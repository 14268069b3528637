"""Paged allocation: fixed-size blocks from a free list, a block table per sequence.

Blocks are allocated on demand: ``admit`` takes blocks for the whole prompt, ``grow`` takes a
new block when a token lands past the last one. ``fork`` shares every block of the parent
(reference counts) and never needs memory. Copy-on-write: before a grow writes into a block
that is shared (ref > 1), the writer takes a fresh block, queues
``CopyOp(src=old block's first slot, dst=new block's first slot, length=tokens of that block
it already computed)`` (no op when that is 0) and drops one reference on the old block. A
full shared block is never written, so it is never copied.

Free list: a deque; allocation pops from the front, ``free`` pushes the sequence's blocks
to the back in reverse table order (tail block first), so the least recently freed block is
reused first.

Admission: NEVER only when the prompt is longer than ``max_len`` or needs more blocks than
the pool has; LATER when fewer blocks are free than the prompt needs. A sequence whose
``max_len`` exceeds the pool is admitted: it gets None from ``grow`` once the pool is full.

Invariants (check_invariants):
  * ``ref[b]`` equals the number of block-table entries naming ``b``; ``ref[b] >= 0``;
  * a block is in the free list (exactly once) iff ``ref[b] == 0``; free + used == num_blocks;
  * a sequence holds exactly ``ceil(max(num_tokens, prompt_len) / block_size)`` blocks, none twice;
  * a shared block is frozen: every owner has computed the same number of its slots (any
    write into a shared block copies it first). ``usage`` relies on this.

Usage convention for a shared block: its computed slots count once as ``token``; an empty
slot counts as ``reserved`` when any owner's final length reaches its position (the owner
that ends up alone on the block may fill it), else ``internal``.
"""
from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocators.base import (
    Admission,
    Allocator,
    AllocatorError,
    CopyOp,
    Fit,
    MemoryUsage,
    ceil_div,
    check_block_size,
    check_length,
    grow_end,
    refuse_never,
)
from allocators.run_sums import RunSums


@dataclass(slots=True)
class _PagedSeq:
    table: list[int]  # block ids in token order
    num_tokens: int  # computed tokens
    prompt_len: int
    max_len: int


class PagedAllocator(Allocator):
    """Fixed-size blocks on demand, shared on fork, copy-on-write; ``block_size`` a power of two."""

    name = "paged"
    _tracks_ids = False  # True: grow calls _note_ids (the prefix-caching subclass)

    def __init__(self, num_slots: int, block_size: int = 16, debug: bool = False) -> None:
        self.block_size = check_block_size(block_size, num_slots)
        self.num_slots = num_slots
        self.debug = bool(debug)
        self.num_blocks = num_slots // block_size
        self._shift = block_size.bit_length() - 1
        self._mask = block_size - 1
        self._ref = [0] * self.num_blocks
        self._init_free_list()
        self._seqs: dict[int, _PagedSeq] = {}
        self._copy_ops: list[CopyOp] = []
        self._num_copy_ops = 0
        self._copied_slots = 0

    # -- free list (overridden by the prefix-caching subclass; any container with len) --------
    def _init_free_list(self) -> None:
        self._free: deque[int] = deque(range(self.num_blocks))

    def _take_block(self) -> int:
        """Pop the next free block (the caller has checked one exists)."""
        return self._free.popleft()

    def _release_blocks(self, blocks: list[int]) -> None:
        """Blocks whose last reference was just dropped, tail block first."""
        self._free.extend(blocks)

    # -- lifecycle -------------------------------------------------------------------------
    def _refuse(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None) -> Admission | None:
        """Checks shared by every paged admit: a refusal, None when the prompt may fit."""
        return refuse_never(self._seqs, seq_id, prompt, max_len, final_len, self.block_size, self.num_blocks, "blocks")

    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        refusal = self._refuse(seq_id, prompt, max_len, final_len)
        if refusal is not None:
            return refusal
        need = ceil_div(len(prompt), self.block_size)
        if need > len(self._free):
            return Admission(Fit.LATER, f"prompt needs {need} blocks; {len(self._free)} free")
        self._seqs[seq_id] = _PagedSeq(self._take_fresh(need), 0, len(prompt), max_len)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK)

    def _take_fresh(self, count: int) -> list[int]:
        blocks = [self._take_block() for _ in range(count)]
        ref = self._ref
        for b in blocks:
            ref[b] = 1
        return blocks

    def _copy_on_write(self, seq: _PagedSeq, index: int) -> int:
        """Give ``seq`` a private copy of its shared block ``index``; the new block id."""
        old = seq.table[index]
        new = self._take_block()
        self._ref[new] = 1
        self._ref[old] -= 1
        seq.table[index] = new
        held = seq.num_tokens - (index << self._shift)
        if held > 0:
            held = min(held, self.block_size)
            self._copy_ops.append(CopyOp(old << self._shift, new << self._shift, held))
            self._num_copy_ops += 1
            self._copied_slots += held
        return new

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        if (num_tokens.__class__ is int and num_tokens == 1 and seq is not None  # grow_end's checks, inline
                and seq.num_tokens < seq.max_len and (token_ids is None or len(token_ids) == 1)):
            end = seq.num_tokens + 1
        else:
            end = grow_end(seq_id, seq, num_tokens, token_ids)
        t = seq.num_tokens
        table = seq.table
        shift = self._shift
        if num_tokens == 1:  # the decode hot path
            index = t >> shift
            if index < len(table):
                block = table[index]
                if self._ref[block] > 1:
                    if not self._free:
                        return None
                    block = self._copy_on_write(seq, index)
            else:
                if not self._free:
                    return None
                block = self._take_block()
                self._ref[block] = 1
                table.append(block)
            seq.num_tokens = end
            if self._tracks_ids:
                self._note_ids(seq_id, seq, token_ids)
            if self.debug:
                self.check_invariants()
            return [(block << shift) | (t & self._mask)]
        if num_tokens == 0:
            return []
        first, last = t >> shift, (end - 1) >> shift
        ref = self._ref
        shared = [i for i in range(first, min(last + 1, len(table))) if ref[table[i]] > 1]
        new_blocks = max(0, last + 1 - len(table))
        if len(shared) + new_blocks > len(self._free):
            return None
        for index in shared:
            self._copy_on_write(seq, index)
        if new_blocks:
            table.extend(self._take_fresh(new_blocks))
        seq.num_tokens = end
        slots: list[int] = []
        pos = t
        while pos < end:
            index = pos >> shift
            stop = min(end, (index + 1) << shift)
            base = (table[index] << shift) - (index << shift)  # slot of position p is base + p
            slots.extend(range(base + pos, base + stop))
            pos = stop
        if self._tracks_ids:
            self._note_ids(seq_id, seq, token_ids)
        if self.debug:
            self.check_invariants()
        return slots

    def grow_many(self, grows: Sequence[tuple[int, Sequence[int]]]) -> list[list[int]]:
        """As the base: one-token grows into a private block or a free one are booked here, any
        other through ``grow``."""
        if self.debug or type(self).grow is not PagedAllocator.grow:  # a subclass that grows otherwise
            return super().grow_many(grows)
        seqs, ref, free = self._seqs, self._ref, self._free
        shift, mask, tracks = self._shift, self._mask, self._tracks_ids
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
            seq.num_tokens = t + 1
            if tracks:
                self._note_ids(seq_id, seq, token_ids)
            out.append([(block << shift) | (t & mask)])
        return out

    # -- decode runs (kvbench.engine.decode_run): many steps of one-token grows at once --------
    def decode_run_ready(self, num_running: int) -> bool:
        """Whether the ``num_running`` running sequences are all the live ones and no block is
        shared: then each holds exactly the blocks its tokens fill (the class invariant), each
        block private, and their one-token grows need a block only at a block boundary."""
        return len(self._seqs) == num_running and not self._shared_entries()

    def num_free_blocks(self) -> int:
        return len(self._free)

    def _shared_entries(self) -> int:
        """Table entries past one per used block: blocks shared between sequences."""
        return sum([len(s.table) for s in self._seqs.values()]) - self._used_blocks()

    def _partials_private(self) -> bool:
        """Whether every live sequence's partial last block is its own (shared blocks are full)."""
        mask, ref = self._mask, self._ref
        return all([not s.num_tokens & mask or ref[s.table[-1]] == 1 for s in self._seqs.values()])

    def _blocks_needed(self, prompt: Sequence[int], hits: list[int]) -> int:
        """Free blocks an admit takes: the prompt's blocks past its cached ``hits``, and those
        hits that no live sequence holds (a prefix cache's; paged has none)."""
        ref = self._ref
        return ceil_div(len(prompt), self.block_size) - len(hits) + sum(1 for b in hits if not ref[b])

    def _cache_room(self) -> tuple[int, int] | None:
        """A prefix cache's (cached blocks, free blocks taken before any cached one), or None."""
        return None

    def decode_run_room(self, run: RunSums, steps: int) -> tuple[int, int]:
        """Of ``steps`` rounds of one-token grows of the run's sequences: how many fit in the
        free blocks, and the blocks the first round takes."""
        taken = run.takes(steps)
        return bisect.bisect_right(taken, len(self._free)), taken[0] if steps else 0

    def decode_run_books(self, run: RunSums, steps: int, grown: bool = False) -> tuple:
        """``usage`` (token, reserved, internal, external slots), the per-sequence and distinct
        block counts and the cached slots (None: no prefix cache) after each round of a run, as
        lists over the rounds (as ``_partial_blocks``: one partial block per sequence at most,
        private; shared blocks are full). ``grown``: the rounds' blocks are already taken.

        From the run's sums alone (``RunSums``): a block-table entry past the shared ones holds
        its tokens once, so token = context - shared entries x block size; the partial blocks'
        empty slots (blocks x size - context) are internal where a sequence's tokens have
        reached its final block (that block's tail past the final length), reserved otherwise.
        The final lengths are at least each sequence's context after the run."""
        bs = self.block_size
        takes = run.takes(steps)
        internal = run.internal(steps)
        context0, blocks0, n = run.context, run.blocks, len(run)
        # the tables hold a block per block of tokens (``check``), the round's when ``grown``: the
        # entries past the used blocks are the shared ones (``_shared_entries``, without the walk)
        shared = blocks0 + (takes[0] if grown else 0) - self._used_blocks()
        room = self._cache_room()
        token, reserved, external, blocks = [], [], [], []
        cached = None if room is None else []
        for j in range(steps):
            context = context0 + n * (j + 1)
            per_table = blocks0 + takes[j]
            free_slots = self.num_slots - (per_table - shared) * bs
            if room is not None:  # a grow takes a free block while there is one, else evicts a cached one
                num_cached, num_free = room
                slots = num_cached * bs if grown else (num_cached - max(takes[j] - num_free, 0)) * bs
                cached.append(slots)
                free_slots -= slots
            token.append(context - shared * bs)
            reserved.append(per_table * bs - context - internal[j])
            external.append(free_slots)
            blocks.append((per_table, per_table - shared))
        return token, reserved, internal, external, blocks, cached

    def admit_waits(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None,
                    taken: int) -> bool:
        """Whether ``admit`` would answer LATER, changing nothing, after ``taken`` more blocks go."""
        return self._refuse(seq_id, prompt, max_len, final_len) is None \
            and ceil_div(len(prompt), self.block_size) > len(self._free) - taken

    def grow_decode_run(self, run: RunSums, steps: int, token_ids: Sequence[Sequence[int]]) -> None:
        """``steps`` rounds of ``grow_many`` of one token for every sequence of the run, in order,
        from the state ``decode_run_ready`` accepts (the caller has checked that the free blocks
        suffice); ``token_ids``: each one's ids, the run's included. The run keeps the tables
        grouped by position in their last block (``RunSums.alloc_cache``) while its sequences stay."""
        mask = self._mask
        if run.alloc_cache is None and steps == 1:  # one round (a step short of blocks): no grouping
            live, ids, ref = self._seqs, run.seq_ids, self._ref
            for i in [i for i, nt in enumerate(run.tokens_now()) if not nt & mask]:  # those whose next token starts a block
                block = self._take_block()
                ref[block] = 1
                live[ids[i]].table.append(block)
            for seq_id in ids:
                live[seq_id].num_tokens += 1
            return
        if run.alloc_cache is None:
            seqs = [self._seqs[seq_id] for seq_id in run.seq_ids]
            by_phase: list[list[_PagedSeq]] = [[] for _ in range(self.block_size)]
            for seq, gathered in zip(seqs, run.tokens0):
                by_phase[gathered & mask].append(seq)  # by position when the run's sums were gathered
            run.alloc_cache = seqs, by_phase
        seqs, by_phase = run.alloc_cache
        ref, since = self._ref, run.rounds
        for j in range(steps):  # round j + 1: those whose next token starts a block
            for seq in by_phase[(-j - since) & mask]:
                block = self._take_block()
                ref[block] = 1
                seq.table.append(block)
        for seq in seqs:
            seq.num_tokens += steps

    def _note_ids(self, seq_id: int, seq: _PagedSeq, token_ids: Sequence[int] | None) -> None:
        """Hook after a grow of ``len(token_ids)`` > 0 tokens (only when ``_tracks_ids``)."""

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        """The child shares every parent block (ref + 1); never short of memory."""
        parent = self._seqs.get(parent_id)
        if parent is None:
            raise AllocatorError(f"unknown sequence {parent_id}")
        if child_id in self._seqs:
            raise AllocatorError(f"sequence {child_id} is already live")
        if final_len is not None:
            check_length("final_len", final_len)
        ref = self._ref
        for b in self._held(parent_id, parent):
            ref[b] += 1
        self._seqs[child_id] = self._child_of(parent)
        self._forked(parent_id, child_id)
        if self.debug:
            self.check_invariants()
        return True

    def _held(self, seq_id: int, seq: _PagedSeq) -> list[int]:
        """The table entries that hold a reference (subclasses may drop some, e.g. a window)."""
        return seq.table

    def _forked(self, parent_id: int, child_id: int) -> None:
        """Hook after a fork: subclasses copy their per-sequence state."""

    def _child_of(self, parent: _PagedSeq) -> _PagedSeq:
        return _PagedSeq(list(parent.table), parent.num_tokens, parent.prompt_len, parent.max_len)

    def free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        ref = self._ref
        released = []
        for b in reversed(self._held(seq_id, seq)):
            ref[b] -= 1
            if not ref[b]:
                released.append(b)
        self._freed(seq_id)
        self._release_blocks(released)
        if self.debug:
            self.check_invariants()

    def _freed(self, seq_id: int) -> None:
        """Hook after a free, before its blocks return: subclasses drop per-sequence state."""

    # -- views -------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> list[int]:
        return list(self._get(seq_id).table)

    def num_tokens(self, seq_id: int) -> int:
        return self._get(seq_id).num_tokens

    def live_sequences(self) -> list[int]:
        return list(self._seqs)

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def free_blocks(self) -> list[int]:
        """Free block ids in the order they will be reused."""
        return list(self._free)

    def _partial_blocks(self, final_lens: Mapping[int, int] | None,
                        seqs: Sequence[tuple[int, _PagedSeq]] | None = None) -> tuple[int, int, int, int]:
        """(partial blocks, their computed slots, reserved, internal), each block once, over the
        live sequences (``seqs``: those (id, sequence) pairs only).

        A block is partial for a sequence when it lies at or after the block of the sequence's
        next token; every other used block is full for all of its owners (shared blocks are
        frozen), so it holds ``block_size`` token slots. O(live sequences + partial blocks).
        """
        bs, shift = self.block_size, self._shift
        ref = self._ref
        count = filled_total = reserved = internal = 0
        shared: dict[int, list[int]] = {}
        for seq_id, seq in self._seqs.items() if seqs is None else seqs:
            table, nt = seq.table, seq.num_tokens
            if final_lens is None:
                final = 0
            else:
                try:
                    final = final_lens[seq_id]
                except KeyError:
                    raise AllocatorError(f"usage() needs the final length of live sequence {seq_id}") from None
            index = nt >> shift
            last = len(table) - 1
            if index > last:
                continue
            base = index << shift
            if index == last and ref[table[index]] == 1:  # the common case: one private partial block
                filled = nt - base
                reach = final - base
                reach = 0 if reach < 0 else bs if reach > bs else reach
                count += 1
                filled_total += filled
                if reach > filled:
                    reserved += reach - filled
                    internal += bs - reach
                else:
                    internal += bs - filled
                continue
            for index in range(index, len(table)):
                filled = min(max(nt - base, 0), bs)
                reach = min(max(final - base, 0), bs)
                block = table[index]
                if ref[block] == 1:
                    count += 1
                    filled_total += filled
                    r, i = _empty_split(filled, reach, bs)
                    reserved += r
                    internal += i
                else:
                    seen = shared.get(block)
                    if seen is None:
                        shared[block] = [filled, reach]
                    elif reach > seen[1]:
                        seen[1] = reach
                base += bs
        for filled, reach in shared.values():
            count += 1
            filled_total += filled
            r, i = _empty_split(filled, reach, bs)
            reserved += r
            internal += i
        return count, filled_total, reserved, internal

    def _used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        return self._usage(*self._partial_blocks(final_lens))

    def _usage(self, partial: int, filled: int, reserved: int, internal: int) -> MemoryUsage:
        """The breakdown from the partial blocks' counts (``_partial_blocks``): every other used
        block is full of tokens."""
        used = self._used_blocks()
        token = (used - partial) * self.block_size + filled
        return MemoryUsage(token, reserved, internal, self.num_slots - used * self.block_size)

    def run_usage(self, run: RunSums, others: Mapping[int, int]) -> MemoryUsage | None:
        """``usage`` where the live sequences are a decode run's, as it holds them (each partial
        block private, shared blocks full: ``decode_run_ready``), and ``others`` (seq_id -> final
        length): the run's partial blocks from its sums, the others' one by one (none of theirs
        is a run's: those are private). None where those are not all the live ones."""
        if len(self._seqs) != len(run) + len(others):
            return None
        count, filled, reserved, internal = self._partial_blocks(others, [(i, self._seqs[i]) for i in others])
        partial = len(run) - run.at_block_start()
        run_filled = run.context - self.block_size * (run.blocks - partial)
        run_internal = run.reached_waste()
        return self._usage(count + partial, filled + run_filled,
                           reserved + partial * self.block_size - run_filled - run_internal, internal + run_internal)

    def block_counts(self) -> tuple[int, int] | None:
        """Every block with a reference belongs to a live sequence's table (cached free blocks of
        a prefix cache sit in the free queue), so the distinct count is the used-block count."""
        return sum([len(seq.table) for seq in self._seqs.values()]), self._used_blocks()

    def run_block_counts(self, run: RunSums) -> tuple[int, int]:
        """``block_counts`` where a decode run's sequences are all the live ones: a table holds
        a block per block of tokens, so the run's block sum is the tables' sum."""
        return run.blocks, self._used_blocks()

    def stats(self) -> dict[str, float | int | None]:
        """``logical_slots``: sum of num_tokens over live sequences (no sharing);
        ``physical_slots``: distinct slots holding computed tokens (usage().token)."""
        used = self._used_blocks()
        partial, filled, _, _ = self._partial_blocks(None)
        return {
            "prefix_hit_rate": None,
            "prefix_queries": None,
            "prefix_hits": None,
            "logical_slots": sum(seq.num_tokens for seq in self._seqs.values()),
            "physical_slots": (used - partial) * self.block_size + filled,
            "allocated_slots": used * self.block_size,
            "live_sequences": len(self._seqs),
            "copy_ops": self._num_copy_ops,
            "copied_slots": self._copied_slots,
        }

    def _free_block_ids(self) -> list[int]:
        return list(self._free)

    def check_invariants(self) -> None:
        bs = self.block_size
        counts = [0] * self.num_blocks
        filled_by: dict[int, int] = {}
        for seq_id, seq in self._seqs.items():
            assert 0 <= seq.num_tokens <= seq.max_len, f"seq {seq_id}: {seq.num_tokens} tokens, max_len {seq.max_len}"
            want = ceil_div(max(seq.num_tokens, seq.prompt_len), bs)
            assert len(seq.table) == want, f"seq {seq_id}: {len(seq.table)} blocks, expected {want}"
            assert len(set(seq.table)) == len(seq.table), f"seq {seq_id}: a block twice in its table"
            for index, b in enumerate(seq.table):
                assert 0 <= b < self.num_blocks, f"seq {seq_id}: block {b} out of range"
                counts[b] += 1
                filled = min(max(seq.num_tokens - index * bs, 0), bs)
                if filled_by.setdefault(b, filled) != filled:
                    raise AssertionError(f"shared block {b} not frozen: owners computed {filled_by[b]} and {filled} slots")
        free = self._free_block_ids()
        assert len(set(free)) == len(free), "a block is twice in the free list"
        free_set = set(free)
        for b in range(self.num_blocks):
            assert self._ref[b] >= 0, f"block {b}: ref {self._ref[b]} < 0"
            assert self._ref[b] == counts[b], f"block {b}: ref {self._ref[b]} but {counts[b]} table entries"
            assert (b in free_set) == (counts[b] == 0), f"block {b}: ref {counts[b]}, in free list: {b in free_set}"
        assert len(free) + sum(1 for c in counts if c) == self.num_blocks, "free + used != num_blocks"


def _empty_split(filled: int, reach: int, block_size: int) -> tuple[int, int]:
    """Empty slots of a block holding ``filled`` tokens whose owners reach ``reach``:
    (reserved, internal)."""
    if reach > filled:
        return reach - filled, block_size - reach
    return 0, block_size - filled
