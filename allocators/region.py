"""Books shared by the region strategies (contiguous, buddy): one slot range per sequence.

A region is a run of whole blocks ``[start_block, start_block + nblocks)``, so a sequence's
block table is a run of consecutive block ids and token ``p`` sits at slot
``start_block * block_size + p``. The block table covers the whole region (every slot the
sequence owns), not only its computed tokens.

Reserve policies (how large a region ``admit`` takes; ``L`` is the ``max_len`` given to admit):

    max     L tokens (Orca-Max, static servers).
    pow2    the prompt plus the next power of two of its output positions
            (``final_len - prompt_len``), capped at L: the PagedAttention paper's Orca (Pow2),
            which "over-reserves the space for outputs by at most 2x" (a 24-slot output gets
            32). Never more than L, so pow2 never exceeds max. Needs final_len.
    pow2-total  the next power of two of ``final_len`` (prompt and output rounded together),
            capped at L. On a buddy allocator this gives the same region as oracle (the buddy
            rounds the total to a power of two anyway); kept for comparison. Needs final_len.
    oracle  exactly ``final_len`` tokens. Needs final_len.
    double  prompt + ``double_chunk`` tokens (capped at L). A grow past the region moves the
            sequence to a region twice as large (or just large enough, if that is more; capped
            at L and at the largest region the pool can hold), found first-fit while the old
            region is still held (so source and destination never overlap), queues a CopyOp of
            the computed tokens, then frees the old region. Never reads final_len.

Token counts are rounded up to whole blocks, then by the subclass to a size it can hand out
(buddy: a power of two of at least ``2**min_order`` blocks). A region is at least one block.

Admission refuses with NEVER when the prompt is longer than ``max_len``, when ``max_len``
exceeds ``max_model_len``, when (pow2, pow2-total, oracle) ``final_len`` exceeds ``max_len``, or when the
(initial) region is larger than the largest region the pool can ever hold; with LATER when
no free space is large enough now. The final_len policies raise AllocatorError when final_len is
None or shorter than the prompt, and when a sequence grows past its region (its final_len
was wrong).

Subclasses implement the free-space books: ``_round_blocks``, ``_take_region``,
``_give_region``, ``_free_block_count``, ``_check_free_space`` and set
``_max_region_blocks`` and ``_usable_blocks``.
"""
from __future__ import annotations

import abc
import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

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
    next_pow2,
)
from allocators.run_sums import RunSums

RESERVE_POLICIES = ("max", "pow2", "pow2-total", "oracle", "double")
FINAL_LEN_POLICIES = ("pow2", "pow2-total", "oracle")


@dataclass(slots=True)
class _Region:
    start_block: int
    nblocks: int
    start: int  # first slot: start_block * block_size
    capacity: int  # slots in the region: nblocks * block_size
    num_tokens: int  # computed tokens, at slots [start, start + num_tokens)
    prompt_len: int
    max_len: int


class RegionAllocator(Allocator):
    """One contiguous, block-aligned region per sequence; see the module docstring."""

    forks_share_blocks = False  # a fork copies into its own region (kvbench.engine.sample_holds)
    _max_region_blocks: int  # the largest region the pool can ever hand out
    _usable_blocks: int  # blocks that free space and regions cover (buddy may leave some out)

    def __init__(
        self,
        num_slots: int,
        block_size: int = 16,
        reserve: str = "max",
        max_model_len: int = 2048,
        double_chunk: int = 16,
        debug: bool = False,
    ) -> None:
        self.block_size = check_block_size(block_size, num_slots)
        self.num_slots = num_slots
        if reserve not in RESERVE_POLICIES:
            raise AllocatorError(f"reserve must be one of {', '.join(RESERVE_POLICIES)}; got {reserve!r}")
        self.reserve = reserve
        self.max_model_len = check_length("max_model_len", max_model_len, 1)
        self.double_chunk = check_length("double_chunk", double_chunk, 0)
        self.debug = bool(debug)
        self.num_blocks = num_slots // block_size  # the tail num_slots % block_size is never used
        self._seqs: dict[int, _Region] = {}
        self._copy_ops: list[CopyOp] = []
        self._num_copy_ops = 0
        self._copied_slots = 0
        self._num_moves = 0

    # -- free-space books (subclasses) -------------------------------------------------------
    @abc.abstractmethod
    def _round_blocks(self, nblocks: int) -> int:
        """The region size actually handed out for a request of ``nblocks`` (>= 1) blocks."""

    @abc.abstractmethod
    def _take_region(self, nblocks: int) -> int | None:
        """Allocate ``nblocks`` (already rounded) blocks; the first block id, or None."""

    @abc.abstractmethod
    def _give_region(self, start_block: int, nblocks: int) -> None:
        """Return a region to the free space."""

    @abc.abstractmethod
    def _has_region(self, nblocks: int) -> bool:
        """Whether ``_take_region(nblocks)`` would succeed now (it changes nothing)."""

    @abc.abstractmethod
    def _free_block_count(self) -> int:
        """Blocks currently free."""

    @abc.abstractmethod
    def _check_free_space(self, owner: list[int | None]) -> None:
        """Assert the free-space books are sound and disjoint from owned blocks (owner[b]: seq id or None)."""

    # -- reservation -------------------------------------------------------------------------
    def _reserve_tokens(self, held: int, prompt_len: int, max_len: int, final_len: int | None) -> int:
        """Tokens the policy reserves for a sequence that now needs ``held`` slots."""
        policy = self.reserve
        if policy == "max":
            return max_len
        if policy == "double":
            return min(held + self.double_chunk, max_len)
        if final_len is None:
            raise AllocatorError(f"reserve={policy!r} needs the true final_len, got None")
        if not prompt_len <= final_len <= max_len or final_len < held:
            raise AllocatorError(
                f"final_len={final_len} must lie in [{max(held, prompt_len)}, max_len={max_len}]"
            )
        if policy == "oracle":
            return final_len
        if policy == "pow2-total":
            return min(next_pow2(final_len), max_len)
        output = final_len - prompt_len
        return min(prompt_len + (next_pow2(output) if output else 0), max_len)

    def _blocks_for(self, tokens: int) -> int:
        return self._round_blocks(max(1, ceil_div(tokens, self.block_size)))

    def _queue_copy(self, src: int, dst: int, length: int) -> None:
        if length:
            self._copy_ops.append(CopyOp(src, dst, length))
            self._num_copy_ops += 1
            self._copied_slots += length

    def _record(self, seq_id: int, start_block: int, nblocks: int, num_tokens: int, prompt_len: int, max_len: int) -> None:
        bs = self.block_size
        start, capacity = start_block * bs, nblocks * bs
        self._seqs[seq_id] = _Region(start_block, nblocks, start, capacity, num_tokens, prompt_len, max_len)

    # -- lifecycle ---------------------------------------------------------------------------
    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        if seq_id in self._seqs:
            raise AllocatorError(f"sequence {seq_id} is already live")
        check_length("max_len", max_len, 1)
        if final_len is not None:
            check_length("final_len", final_len)
        prompt_len = len(prompt)
        if prompt_len > max_len:
            return Admission(Fit.NEVER, f"prompt of {prompt_len} tokens is longer than max_len={max_len}")
        if max_len > self.max_model_len:
            return Admission(Fit.NEVER, f"max_len={max_len} exceeds max_model_len={self.max_model_len}")
        if final_len is not None and final_len > max_len and self.reserve in FINAL_LEN_POLICIES:
            return Admission(Fit.NEVER, f"final_len={final_len} exceeds max_len={max_len}")
        nblocks = self._blocks_for(self._reserve_tokens(prompt_len, prompt_len, max_len, final_len))
        if nblocks > self._max_region_blocks:
            return Admission(
                Fit.NEVER,
                f"reserve={self.reserve} needs {nblocks * self.block_size} slots; "
                f"the largest region this pool holds is {self._max_region_blocks * self.block_size}",
            )
        start_block = self._take_region(nblocks)
        if start_block is None:
            return Admission(Fit.LATER, f"no free region of {nblocks * self.block_size} slots")
        self._record(seq_id, start_block, nblocks, 0, prompt_len, max_len)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK)

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        if (num_tokens.__class__ is int and num_tokens == 1 and seq is not None  # grow_end's checks, inline
                and seq.num_tokens < seq.max_len and (token_ids is None or len(token_ids) == 1)):
            end = seq.num_tokens + 1
        else:
            end = grow_end(seq_id, seq, num_tokens, token_ids)
        t = seq.num_tokens
        if end > seq.capacity and not self._move(seq_id, seq, end):
            return None
        seq.num_tokens = end
        if self.debug:
            self.check_invariants()
        first = seq.start + t
        if num_tokens == 1:
            return [first]
        return list(range(first, first + num_tokens))

    def _move(self, seq_id: int, seq: _Region, end: int) -> bool:
        """Grow a double-policy region past ``end`` tokens by moving it; False when out of memory."""
        if self.reserve != "double":
            raise AllocatorError(
                f"sequence {seq_id} outgrew its reserve={self.reserve} region of {seq.capacity} slots "
                f"(its final_len was too small)"
            )
        needed = ceil_div(end, self.block_size)
        target = min(max(2 * seq.nblocks, needed), ceil_div(seq.max_len, self.block_size))
        if self._round_blocks(target) > self._max_region_blocks and needed <= self._max_region_blocks:
            target = self._max_region_blocks
        nblocks = self._round_blocks(target)
        if nblocks > self._max_region_blocks:
            return False
        start_block = self._take_region(nblocks)
        if start_block is None:
            return False
        self._queue_copy(seq.start, start_block * self.block_size, seq.num_tokens)
        self._give_region(seq.start_block, seq.nblocks)
        self._num_moves += 1
        seq.start_block, seq.nblocks = start_block, nblocks
        seq.start, seq.capacity = start_block * self.block_size, nblocks * self.block_size
        return True

    # -- decode runs (kvbench.engine.decode_run): many rounds of one-token grows at once -------
    def decode_run_ready(self, num_running: int) -> bool:
        """Whether the ``num_running`` running sequences are all the live ones."""
        return len(self._seqs) == num_running

    def decode_run_room(self, run: RunSums, steps: int) -> tuple[int, int]:
        """Of ``steps`` rounds of one-token grows: how many fit in the regions (no move), and
        the blocks the first round takes (none)."""
        seqs = self._seqs
        return min(steps, min([seqs[i].capacity - n for i, n in zip(run.seq_ids, run.tokens_now())])), 0

    def decode_run_books(self, run: RunSums, steps: int, grown: bool = False) -> tuple:
        """``usage`` (token, reserved, internal, external slots) after each round of a run, as
        lists over the rounds; no block counts (regions are not shared), no cache. A region's
        reserved slots after round j are its gap to fill (min(final length, capacity) less its
        tokens now) less j, while positive: summed over the gaps past j, sorted."""
        seqs = self._seqs
        gaps = sorted([min(final, seqs[i].capacity) - held
                       for i, held, final in zip(run.seq_ids, run.tokens_now(), run.final_lens)])
        largest = list(accumulate(reversed(gaps), initial=0))  # largest[m]: the m largest gaps' sum
        n, context = len(gaps), run.context
        allocated = sum(seq.capacity for seq in seqs.values())
        token, reserved, internal = [], [], []
        for j in range(1, steps + 1):
            m = n - bisect.bisect_right(gaps, j)  # regions still short of their fill after round j
            held, short = context + n * j, largest[m] - j * m
            token.append(held)
            reserved.append(short)
            internal.append(allocated - held - short)
        return token, reserved, internal, [self.num_slots - allocated] * steps, None, None

    def admit_waits(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None,
                    taken: int) -> bool:
        """Whether ``admit`` would answer LATER, changing nothing (runs take no blocks)."""
        if seq_id in self._seqs or len(prompt) > max_len or max_len > self.max_model_len \
                or (final_len is not None and final_len > max_len and self.reserve in FINAL_LEN_POLICIES):
            return False
        try:
            nblocks = self._blocks_for(self._reserve_tokens(len(prompt), len(prompt), max_len, final_len))
        except AllocatorError:
            return False
        return nblocks <= self._max_region_blocks and not self._has_region(nblocks)

    def grow_decode_run(self, run: RunSums, steps: int, token_ids: Sequence[Sequence[int]]) -> None:
        """``steps`` rounds of one-token grows, all inside their regions."""
        for seq_id in run.seq_ids:
            self._seqs[seq_id].num_tokens += steps

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        """The child gets its own region (same policy, sized for the parent's tokens) and a CopyOp."""
        parent = self._seqs.get(parent_id)
        if parent is None:
            raise AllocatorError(f"unknown sequence {parent_id}")
        if child_id in self._seqs:
            raise AllocatorError(f"sequence {child_id} is already live")
        if final_len is not None:
            check_length("final_len", final_len)
        held = max(parent.num_tokens, parent.prompt_len)
        nblocks = self._blocks_for(self._reserve_tokens(held, parent.prompt_len, parent.max_len, final_len))
        if nblocks > self._max_region_blocks:
            return False
        start_block = self._take_region(nblocks)
        if start_block is None:
            return False
        self._record(child_id, start_block, nblocks, parent.num_tokens, parent.prompt_len, parent.max_len)
        self._queue_copy(parent.start, start_block * self.block_size, parent.num_tokens)
        if self.debug:
            self.check_invariants()
        return True

    def free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        self._give_region(seq.start_block, seq.nblocks)
        if self.debug:
            self.check_invariants()

    # -- views -------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> list[int]:
        """The whole region: ``nblocks`` consecutive block ids."""
        seq = self._get(seq_id)
        return list(range(seq.start_block, seq.start_block + seq.nblocks))

    def num_tokens(self, seq_id: int) -> int:
        return self._get(seq_id).num_tokens

    def live_sequences(self) -> list[int]:
        return list(self._seqs)

    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        """Per region: computed tokens, then reserved up to min(final_len, capacity), internal beyond."""
        token = reserved = allocated = 0
        for seq_id, seq in self._seqs.items():
            try:
                final = final_lens[seq_id]
            except KeyError:
                raise AllocatorError(f"usage() needs the final length of live sequence {seq_id}") from None
            cap = seq.capacity
            fill = final if final < cap else cap
            token += seq.num_tokens
            if fill > seq.num_tokens:
                reserved += fill - seq.num_tokens
            allocated += cap
        return MemoryUsage(token, reserved, allocated - token - reserved, self.num_slots - allocated)

    def stats(self) -> dict[str, float | int | None]:
        """No sharing: logical_slots == physical_slots == computed tokens of the live sequences."""
        held = sum(seq.num_tokens for seq in self._seqs.values())
        return {
            "prefix_hit_rate": None,
            "prefix_queries": None,
            "prefix_hits": None,
            "logical_slots": held,
            "physical_slots": held,
            "allocated_slots": (self._usable_blocks - self._free_block_count()) * self.block_size,
            "live_sequences": len(self._seqs),
            "copy_ops": self._num_copy_ops,
            "copied_slots": self._copied_slots,
            "moves": self._num_moves,
        }

    def check_invariants(self) -> None:
        owner: list[int | None] = [None] * self.num_blocks
        used = 0
        bs = self.block_size
        for seq_id, seq in self._seqs.items():
            where = f"seq {seq_id} at block {seq.start_block}"
            assert seq.nblocks >= 1 and seq.nblocks == self._round_blocks(seq.nblocks), f"{where}: bad size {seq.nblocks}"
            assert seq.start == seq.start_block * bs and seq.capacity == seq.nblocks * bs, f"{where}: stale geometry"
            assert 0 <= seq.start_block and seq.start_block + seq.nblocks <= self.num_blocks, f"{where}: out of pool"
            assert 0 <= seq.num_tokens <= seq.max_len, f"seq {seq_id}: {seq.num_tokens} tokens, max_len {seq.max_len}"
            assert max(seq.num_tokens, seq.prompt_len) <= seq.capacity, f"seq {seq_id}: tokens past its region"
            for b in range(seq.start_block, seq.start_block + seq.nblocks):
                assert owner[b] is None, f"block {b} owned by seq {owner[b]} and seq {seq_id}"
                owner[b] = seq_id
            used += seq.nblocks
        self._check_free_space(owner)
        free = self._free_block_count()
        assert used + free == self._usable_blocks, f"free {free} + used {used} != usable {self._usable_blocks}"
