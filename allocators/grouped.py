"""Paging for mixed models: one block table per layer group, blocks from a group pool.

A model's layer groups (``groups``: ``(kind, size, token_bytes, state_bytes)`` each, see
``kvbench.layer_groups``) share the pool's ``num_slots * slot_bytes`` bytes. Attention groups
(``full``, ``window``, ``chunked``) hold ``block_size`` tokens per block, taken on demand as in
``allocators.paged``: admit takes the whole prompt's blocks in a full group and at most
``size`` tokens' in a window or chunked group, grow the next ones; a grow drops the blocks no token it writes (nor any later one) reads: for a window
of W, those wholly before ``first + 1 - W``; for chunks of C, those before the chunk of
``first`` (``first`` = the first position grown). It drops them before it takes new blocks, so
a refused grow (None) may still have released such blocks (no token from ``first`` on reads
them): the one change a refusal makes. A state group holds one block per request
from admit to free. ``fork`` shares the attention blocks (reference counts, copy-on-write of a
shared partly filled block, as ``paged``) and gives the child its own state block.

The strategies differ only in the pool (``allocators.group_pools``); ``block_table`` is the
first group's table (dropped entries are ``DROPPED``) and ``CopyOp``s name that group's slots;
``group_tables`` gives every group's, and ``attention_layout`` how many block ids each group
may name (the hf executor keeps one KV tensor per attention group, indexed by them).

Breakdown, in units of ``unit_bytes`` (the greatest common divisor of every byte count here: on a
uniform model one slot, so the counts equal ``paged``'s; ``MemoryUsage.total`` is the pool's
bytes / ``unit_bytes``; ``token_slots`` holds the first group's distinct computed tokens, which
the results count as the physical slots of ``sharing_saving_frac``). A block's computed tokens
(times its group's bytes per token) are ``token``, its empty positions the owner will fill
``reserved``, the rest of the block (empty positions never filled, page padding) ``internal``;
a state block is ``token`` for its state and ``internal`` for its padding; everything not in a
block is ``external`` (for ``lcm`` that includes carved blocks that are free).
``stats()`` adds ``<kind>_bytes`` (bytes in blocks of that kind of group) and
``window_freed_blocks``.

Per layer group of the model (``MemoryUsage.groups``, fractions of the pool's bytes): ``held``,
the bytes in that group's blocks (``uniform`` pages all attention layers in one block, split
here by each group's bytes per token), and ``needed``, what its layers still read for the next
token of every live sequence: every computed token in a full group, the last ``size`` in a
window group, those of the current chunk in a chunked group, one state in a state group (a
forked sample's tokens counted once per sample). ``needed`` is the same for every strategy at
the same sequences; ``held - needed`` is the memory a strategy keeps that no layer reads.
"""
from __future__ import annotations

import math
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
)

DROPPED = -1
KINDS = ("full", "window", "chunked", "state")


@dataclass(frozen=True, slots=True)
class GroupSpec:
    kind: str
    size: int | None  # window or chunk in tokens
    token_bytes: int  # attention groups
    state_bytes: int  # state groups


def parse_groups(groups) -> list[GroupSpec]:
    """Group specs from the ``groups`` knob (sequences of kind, size, token_bytes, state_bytes)."""
    if not groups:
        raise AllocatorError("groups must list the model's layer groups (kind, size, token_bytes, state_bytes)")
    specs = []
    for entry in groups:
        kind, size, token_bytes, state_bytes = (list(entry) + [0])[:4] if len(entry) == 3 else entry
        if kind not in KINDS:
            raise AllocatorError(f"group kind must be one of {', '.join(KINDS)}; got {kind!r}")
        if kind in ("window", "chunked"):
            check_length(f"{kind} size", size, 1)
        if kind == "state":
            check_length("state_bytes", state_bytes, 1)
        else:
            check_length("token_bytes", token_bytes, 1)
        specs.append(GroupSpec(kind, size, int(token_bytes), int(state_bytes)))
    specs.sort(key=lambda g: KINDS.index(g.kind))
    if specs[0].kind == "state":
        raise AllocatorError("groups need at least one attention group (full, window or chunked)")
    return specs


def most_blocks_held(spec: GroupSpec, length: int, block_size: int, prefill_chunk: int) -> int:
    """The most blocks one request of ``length`` tokens holds at once in a group, prefilled in chunks
    of at most ``prefill_chunk`` tokens: every block of a full group; one in a state group; in a
    window (chunked) group, what ``admit`` takes or, if more, the blocks under the positions one
    grow reads and writes, at the worst alignment to the blocks: a chunk of ``prefill_chunk`` and
    the ``size - 1`` tokens before it (up to ``size - 1`` tokens of the current chunk of attention
    before it), ``size + prefill_chunk - 1`` positions."""
    whole = ceil_div(length, block_size)
    if spec.kind == "state":
        return 1
    if spec.kind == "full":
        return whole
    admitted = ceil_div(min(length, spec.size + prefill_chunk), block_size)
    span = spec.size + prefill_chunk - 1
    return min(whole, max(admitted, ceil_div(span - 1, block_size) + 1))


@dataclass(slots=True)
class _Seq:
    tables: list[list[int]]  # per attention group, block ids in token order
    dropped: list[int]  # per attention group: leading DROPPED entries
    states: list[int]  # per state group: its block
    num_tokens: int
    prompt_len: int
    max_len: int


class GroupedAllocator(Allocator):
    """Per-group block tables over a pool that ``_make_pool`` chooses (subclasses)."""

    name = ""

    def __init__(self, num_slots: int, block_size: int = 16, groups=None, slot_bytes: int | None = None,
                 prefill_chunk: int = 2048, debug: bool = False, model_groups=None) -> None:
        self.block_size = check_block_size(block_size, num_slots)
        self.prefill_chunk = check_length("prefill_chunk", prefill_chunk, 1)
        self.num_slots = num_slots
        self.debug = bool(debug)
        self.groups = parse_groups(groups)
        # the model's own groups (uniform pages them merged); per-group memory is reported on these
        self.model_groups = self.groups if model_groups is None else parse_groups(model_groups)
        self.attention = [g for g in self.groups if g.kind != "state"]
        self.state = [g for g in self.groups if g.kind == "state"]
        default_slot = sum(g.token_bytes for g in self.attention)
        self.slot_bytes = default_slot if slot_bytes is None else check_length("slot_bytes", slot_bytes, 1)
        self.pool_bytes = num_slots * self.slot_bytes
        self.pool = self._make_pool()
        self.unit_bytes = math.gcd(self.slot_bytes, *self.pool.block_bytes,
                                   *(g.token_bytes or g.state_bytes for g in self.groups))
        self._seqs: dict[int, _Seq] = {}
        self._ref: list[dict[int, int]] = [{} for _ in self.groups]  # group index -> block -> refs
        self._copy_ops: list[CopyOp] = []
        self._num_copy_ops = 0
        self._copied_slots = 0
        self._window_freed = 0

    # subclasses: the pool over self.pool_bytes, indexed like self.groups
    def _make_pool(self):
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------------------
    def _state_index(self, i: int) -> int:
        return len(self.attention) + i

    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        if seq_id in self._seqs:
            raise AllocatorError(f"sequence {seq_id} is already live")
        check_length("max_len", max_len, 1)
        if final_len is not None:
            check_length("final_len", final_len)
        if len(prompt) > max_len:
            return Admission(Fit.NEVER, f"prompt of {len(prompt)} tokens is longer than max_len={max_len}")
        needs = {g: self._admit_blocks(spec, len(prompt)) for g, spec in enumerate(self.attention)}
        needs.update({self._state_index(i): 1 for i in range(len(self.state))})
        if not self.pool.fits(needs, ever=True):
            return Admission(Fit.NEVER, f"prompt of {len(prompt)} tokens needs {self._describe(needs)}; "
                                        f"the pool cannot hold them")
        if not self.pool.fits(needs):
            return Admission(Fit.LATER, f"prompt of {len(prompt)} tokens needs {self._describe(needs)}; not free now")
        tables = [self._take(g, needs[g]) for g in range(len(self.attention))]
        states = [self._take(self._state_index(i), 1)[0] for i in range(len(self.state))]
        self._seqs[seq_id] = _Seq(tables, [0] * len(tables), states, 0, len(prompt), max_len)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK)

    def _admit_blocks(self, spec: GroupSpec, prompt_len: int) -> int:
        """Blocks admit takes in a group: the whole prompt's for a full group; for a window or
        chunked group at most ``size + prefill_chunk`` tokens' (what it holds while its prompt is
        computed chunk by chunk; later grows take the rest as they need it). Never more than
        ``most_blocks_held`` of the prompt, the count a static split sizes a group's pool by."""
        tokens = prompt_len if spec.kind == "full" else min(prompt_len, spec.size + self.prefill_chunk)
        return ceil_div(tokens, self.block_size)

    def _describe(self, needs: Mapping[int, int]) -> str:
        """Blocks per group, named by kind: ``full 10 + window 3 blocks``."""
        return " + ".join(f"{self.groups[g].kind} {n}" for g, n in sorted(needs.items())) + " blocks"

    @property
    def max_seq_tokens(self) -> int:
        """About the most tokens one sequence could hold with the pool to itself (the scheduler
        rejects longer requests at once; a lone sequence that still runs out is rejected then)."""
        bs, blocks = self.block_size, self.pool.block_bytes
        fixed = sum(blocks[self._state_index(i)] for i in range(len(self.state)))
        per_token = 0.0
        for g, spec in enumerate(self.attention):
            if spec.kind == "full":
                per_token += blocks[g] / bs
            else:
                fixed += blocks[g] * (ceil_div(spec.size, bs) + 2)
        if per_token == 0:
            return 1 << 62
        return max(0, int((self.pool_bytes - fixed) // per_token))

    def _take(self, group: int, count: int) -> list[int]:
        ref = self._ref[group]
        blocks = [self.pool.take(group) for _ in range(count)]
        for b in blocks:
            ref[b] = 1
        return blocks

    def _unref(self, group: int, blocks: Sequence[int]) -> list[int]:
        """Drop one reference on each block; the ones now unowned, released to the pool."""
        ref, released = self._ref[group], []
        for b in blocks:
            ref[b] -= 1
            if not ref[b]:
                del ref[b]
                released.append(b)
        self.pool.release(group, released)
        return released

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        end = grow_end(seq_id, seq, num_tokens, token_ids)
        if num_tokens == 0:
            return []
        bs, first = self.block_size, seq.num_tokens
        self._drop_unread(seq, first)  # kept even when the grow is refused: nothing from first on reads them
        lo, hi = first // bs, (end - 1) // bs
        needs: dict[int, int] = {}
        cow: list[list[int]] = []
        for g, table in enumerate(seq.tables):
            shared = [i for i in range(max(lo, seq.dropped[g]), min(hi + 1, len(table))) if self._ref[g][table[i]] > 1]
            cow.append(shared)
            new = len(shared) + max(0, hi + 1 - len(table))
            if new:
                needs[g] = new
        if needs and not self.pool.fits(needs):
            return None
        for g, table in enumerate(seq.tables):
            for index in cow[g]:
                self._copy_on_write(g, seq, index)
            if hi + 1 > len(table):
                table.extend(self._take(g, hi + 1 - len(table)))
        seq.num_tokens = end
        table = seq.tables[0]
        slots = [table[p // bs] * bs + p % bs for p in range(first, end)]
        if self.debug:
            self.check_invariants()
        return slots

    def _copy_on_write(self, g: int, seq: _Seq, index: int) -> None:
        old = seq.tables[g][index]
        new = self._take(g, 1)[0]
        self._unref(g, [old])
        seq.tables[g][index] = new
        held = min(seq.num_tokens - index * self.block_size, self.block_size)
        if held > 0:
            self._num_copy_ops += 1
            self._copied_slots += held
            if g == 0:
                self._copy_ops.append(CopyOp(old * self.block_size, new * self.block_size, held))

    def _drop_unread(self, seq: _Seq, first: int) -> None:
        """Release the blocks of window and chunked groups that no token from ``first`` on reads."""
        for g, spec in enumerate(self.attention):
            if spec.kind == "window":
                oldest = first + 1 - spec.size
            elif spec.kind == "chunked":
                oldest = first // spec.size * spec.size
            else:
                continue
            stop, start = max(oldest, 0) // self.block_size, seq.dropped[g]
            if stop <= start:
                continue
            table = seq.tables[g]
            gone = table[start:stop]
            table[start:stop] = [DROPPED] * (stop - start)
            seq.dropped[g] = stop
            self._window_freed += len(self._unref(g, gone[::-1]))

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        """The child shares the parent's attention blocks and takes its own state blocks (a
        copy of the parent's states); False when no state block is free."""
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise AllocatorError(f"sequence {child_id} is already live")
        if final_len is not None:
            check_length("final_len", final_len)
        needs = {self._state_index(i): 1 for i in range(len(self.state))}
        if needs and not self.pool.fits(needs):
            return False
        for g, table in enumerate(parent.tables):
            ref = self._ref[g]
            for b in table[parent.dropped[g]:]:
                ref[b] += 1
        states = [self._take(self._state_index(i), 1)[0] for i in range(len(self.state))]
        self._seqs[child_id] = _Seq([list(t) for t in parent.tables], list(parent.dropped), states,
                                    parent.num_tokens, parent.prompt_len, parent.max_len)
        if self.debug:
            self.check_invariants()
        return True

    def free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        for g, table in enumerate(seq.tables):
            self._unref(g, table[seq.dropped[g]:][::-1])
        for i, block in enumerate(seq.states):
            self._unref(self._state_index(i), [block])
        if self.debug:
            self.check_invariants()

    # -- views -------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> list[int]:
        return list(self._get(seq_id).tables[0])

    def group_tables(self, seq_id: int) -> list[list[int]]:
        """Every attention group's block table, then each state group's one block."""
        seq = self._get(seq_id)
        return [list(t) for t in seq.tables] + [[b] for b in seq.states]

    @property
    def per_group_tables(self) -> bool:
        """Whether the attention groups keep tables of their own (then an executor reads each layer's
        group's table from ``group_tables``, not ``block_table``)."""
        return len(self.attention) > 1

    def attention_layout(self) -> list[tuple[str, int | None, int]]:
        """Each attention group's (kind, size, block ids it may name): what an executor that keeps one
        KV tensor per group sizes them by (``group_tables``' block ids index these tensors)."""
        return [(g.kind, g.size, self.pool.block_ids(i)) for i, g in enumerate(self.attention)]

    def num_tokens(self, seq_id: int) -> int:
        return self._get(seq_id).num_tokens

    def live_sequences(self) -> list[int]:
        return list(self._seqs)

    def _group_bytes(self, final_lens: Mapping[int, int] | None) -> list[tuple[int, int, int]]:
        """(token, reserved, internal) bytes of each group's blocks; a shared block once."""
        bs, out = self.block_size, []
        for g, spec in enumerate(self.attention):
            ref, cost, tb = self._ref[g], self.pool.block_bytes[g], spec.token_bytes
            partial: dict[int, list[int]] = {}
            for seq_id, seq in self._seqs.items():
                final = 0 if final_lens is None else _final(final_lens, seq_id)
                table = seq.tables[g]
                for index in range(max(seq.num_tokens // bs, seq.dropped[g]), len(table)):
                    base = index * bs
                    filled = min(max(seq.num_tokens - base, 0), bs)
                    reach = min(max(final - base, 0), bs)
                    seen = partial.setdefault(table[index], [filled, reach])
                    seen[1] = max(seen[1], reach)
            full = len(ref) - len(partial)
            token = full * bs * tb
            reserved = 0
            for filled, reach in partial.values():
                token += filled * tb
                reserved += max(reach - filled, 0) * tb
            out.append((token, reserved, len(ref) * cost - token - reserved))
        for i, spec in enumerate(self.state):
            g = self._state_index(i)
            used = len(self._ref[g])
            out.append((used * spec.state_bytes, 0, used * (self.pool.block_bytes[g] - spec.state_bytes)))
        return out

    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        parts = self._group_bytes(final_lens)
        token = sum(p[0] for p in parts)
        reserved = sum(p[1] for p in parts)
        internal = sum(p[2] for p in parts)
        u = self.unit_bytes
        held = None  # a uniform model: the counts are slots already
        if len(self.groups) > 1 or self.attention[0].kind != "full":
            held = parts[0][0] // self.attention[0].token_bytes  # distinct computed tokens of the first group
        per_group = None
        if len(self.model_groups) > 1 or self.model_groups[0].kind != "full":
            per_group = tuple(zip((g.kind for g in self.model_groups), self._held_bytes(), self._needed_bytes()))
            per_group = tuple((kind, h / self.pool_bytes, n / self.pool_bytes) for kind, h, n in per_group)
        return MemoryUsage(token // u, reserved // u, internal // u, (self.pool_bytes - token - reserved - internal) // u,
                           token_slots=held, groups=per_group)

    def _held_bytes(self) -> list[float]:
        """Bytes in each model group's blocks (a merged attention group split by bytes per token)."""
        held = [len(self._ref[g]) * self.pool.block_bytes[g] for g in range(len(self.groups))]
        if self.model_groups is self.groups:
            return [float(h) for h in held]
        merged = self.attention[0].token_bytes
        out = [held[0] * g.token_bytes / merged for g in self.model_groups if g.kind != "state"]
        return out + [float(h) for h in held[len(self.attention):]]

    def _needed_bytes(self) -> list[float]:
        """Bytes each model group's layers still read for the next token of every live sequence."""
        out = []
        for spec in self.model_groups:
            total = 0
            for seq in self._seqs.values():
                n = seq.num_tokens
                if spec.kind == "full":
                    total += n
                elif spec.kind == "window":
                    total += min(n, spec.size)
                elif spec.kind == "chunked":
                    total += n - n // spec.size * spec.size
                else:
                    total += 1
            out.append(float(total * (spec.state_bytes if spec.kind == "state" else spec.token_bytes)))
        return out

    def stats(self) -> dict[str, float | int | None]:
        """As ``paged``'s, counted on the first group (slots = its tokens), plus bytes per kind."""
        ref0 = self._ref[0]
        parts = self._group_bytes(None)
        out: dict[str, float | int | None] = {
            "prefix_hit_rate": None, "prefix_queries": None, "prefix_hits": None,
            "logical_slots": sum(seq.num_tokens for seq in self._seqs.values()),
            "physical_slots": parts[0][0] // self.attention[0].token_bytes,
            "allocated_slots": len(ref0) * self.block_size,
            "live_sequences": len(self._seqs),
            "copy_ops": self._num_copy_ops,
            "copied_slots": self._copied_slots,
            "window_freed_blocks": self._window_freed,
        }
        for kind in KINDS:
            out[f"{kind}_bytes"] = sum(len(self._ref[g]) * self.pool.block_bytes[g]
                                       for g, spec in enumerate(self.groups) if spec.kind == kind)
        return out

    def check_invariants(self) -> None:
        bs = self.block_size
        counts: list[dict[int, int]] = [{} for _ in self.groups]
        for seq_id, seq in self._seqs.items():
            assert 0 <= seq.num_tokens <= seq.max_len, f"seq {seq_id}: {seq.num_tokens} tokens"
            want = ceil_div(max(seq.num_tokens, seq.prompt_len), bs)
            for g, table in enumerate(seq.tables):
                if self.attention[g].kind == "full":
                    assert len(table) == want, f"seq {seq_id} group {g}: {len(table)} blocks, expected {want}"
                else:
                    assert ceil_div(seq.num_tokens, bs) <= len(table) <= want, f"seq {seq_id} group {g}: {len(table)} blocks"
                d = seq.dropped[g]
                assert table[:d] == [DROPPED] * d, f"seq {seq_id} group {g}: dropped entries not a prefix"
                live = table[d:]
                assert DROPPED not in live and len(set(live)) == len(live), f"seq {seq_id} group {g}: bad table"
                for b in live:
                    counts[g][b] = counts[g].get(b, 0) + 1
            for i, b in enumerate(seq.states):
                g = self._state_index(i)
                counts[g][b] = counts[g].get(b, 0) + 1
        for g, b in self._other_owned():
            counts[g][b] = counts[g].get(b, 0) + 1
        for g in range(len(self.groups)):
            assert counts[g] == self._ref[g], f"group {g}: reference counts differ from the tables"
        used = sum(len(self._ref[g]) * self.pool.block_bytes[g] for g in range(len(self.groups)))
        used += self._cached_bytes()
        assert self.pool.free_bytes() == self.pool_bytes - used, "free + used bytes != pool bytes"

    def _other_owned(self) -> list[tuple[int, int]]:
        """(group, block) references held outside the sequences' tables (prefix caching's checkpoints)."""
        return []

    def _cached_bytes(self) -> int:
        """Bytes of blocks no sequence references that a prefix cache keeps (none here)."""
        return 0


def _final(final_lens: Mapping[int, int], seq_id: int) -> int:
    try:
        return final_lens[seq_id]
    except KeyError:
        raise AllocatorError(f"usage() needs the final length of live sequence {seq_id}") from None
