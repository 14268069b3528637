"""The allocator seam: what every KV-cache allocation strategy answers, in integers.

An allocator keeps the books of one pool of ``num_slots`` token slots (a slot holds one
token's K and V for every layer). The engine owns the tensors; the allocator only says which
slots a sequence owns, where its next tokens go, and which slot ranges the engine must copy.

Lifecycle of a sequence (ids are chosen by the caller, unique among live sequences):

    admit(seq, prompt, max_len, final_len)  -> Admission   ask-then-take; a refusal changes nothing
    grow(seq, n, token_ids)                  -> slots | None  n more tokens written; None = out of memory
    fork(parent, child, final_len)           -> bool        child starts with the parent's tokens
    free(seq)                                               finish or preemption
    commit()                                                every token grown so far now holds its K/V

``final_len`` (the true total length the sequence will reach) is for oracle policies only;
every other policy must behave identically whatever it is.
"""
from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class AllocatorError(ValueError):
    """Bad input to an allocator: a wrong knob, an unknown sequence, a negative length."""


class Fit(enum.Enum):
    OK = "ok"  # admitted
    LATER = "later"  # does not fit now; may fit once memory is freed
    NEVER = "never"  # can never fit in this pool under this policy


@dataclass(frozen=True, slots=True)
class Admission:
    fit: Fit
    reason: str = ""
    num_cached_tokens: int = 0  # prompt tokens already in the pool (prefix hits): skip computing them

    @property
    def ok(self) -> bool:
        return self.fit is Fit.OK


@dataclass(frozen=True, slots=True)
class CopyOp:
    """Copy slots [src, src + length) to [dst, dst + length) in the pool, every layer."""

    src: int
    dst: int
    length: int


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Every slot of the pool in exactly one category (the paper's Figure 2, plus ``cached``).

    ``cached`` (prefix-caching strategies only, else None) holds reusable prefix K/V that no
    live sequence owns: evictable on demand, so the paper's four-way view counts it as
    external (``paper_external`` = external + cached).
    """

    token: int  # holds a computed token of a live sequence (a shared slot counts once)
    reserved: int  # allocated, empty, and its sequence will fill it before finishing
    internal: int  # allocated, and no owner will ever fill it
    external: int  # not allocated and holding nothing reusable
    cached: int | None = None  # not allocated, holding prefix K/V a later request may reuse
    token_slots: int | None = None  # distinct computed tokens when the counts above are not slots (mixed models)
    # mixed models: per layer group of the model (kind, held, needed) as fractions of the pool's bytes:
    # held in that group's blocks, and what its layers still read (see allocators.grouped)
    groups: tuple[tuple[str, float, float], ...] | None = None

    @property
    def total(self) -> int:
        return self.token + self.reserved + self.internal + self.external + (self.cached or 0)

    @property
    def paper_external(self) -> int:
        """External in the paper's four categories: free and cached slots together."""
        return self.external + (self.cached or 0)

    def fractions(self) -> dict[str, float | None]:
        total = self.total
        return {
            "mem_token_frac": self.token / total,
            "mem_reserved_frac": self.reserved / total,
            "mem_internal_frac": self.internal / total,
            "mem_external_frac": self.external / total,
            "mem_cached_frac": None if self.cached is None else self.cached / total,
        }


def check_length(name: str, value: int, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise AllocatorError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def grow_end(seq_id: int, seq, num_tokens: int, token_ids: Sequence[int] | None) -> int:
    """Check a grow request against a live sequence record (``num_tokens``, ``max_len``);
    return the sequence's length after it."""
    if seq is None:
        raise AllocatorError(f"unknown sequence {seq_id}")
    if num_tokens.__class__ is not int or num_tokens < 0:
        check_length("num_tokens", num_tokens)
    if token_ids is not None and len(token_ids) != num_tokens:
        raise AllocatorError(f"token_ids has {len(token_ids)} ids for {num_tokens} tokens")
    end = seq.num_tokens + num_tokens
    if end > seq.max_len:
        raise AllocatorError(f"sequence {seq_id} would grow to {end} tokens, past max_len={seq.max_len}")
    return end


class Allocator(abc.ABC):
    """Base of every strategy. Subclasses keep ``self.num_slots`` and ``self.block_size``."""

    name: str = ""
    num_slots: int
    block_size: int
    debug: bool = False  # when True, check_invariants() runs after every mutating call

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    def admit(
        self,
        seq_id: int,
        prompt: Sequence[int],
        max_len: int,
        final_len: int | None = None,
    ) -> Admission:
        """Register a sequence whose prompt is ``prompt`` and that may reach ``max_len`` tokens.

        On OK, space for at least the whole prompt is allocated; ``num_cached_tokens`` of it
        already holds the prompt's K/V (prefix sharing) and counts as computed.
        """

    @abc.abstractmethod
    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        """Append ``num_tokens`` computed tokens; return their slots, or None (nothing changed)."""

    def grow_many(self, grows: Sequence[tuple[int, Sequence[int]]]) -> list[list[int]]:
        """``grow(seq_id, len(token_ids), token_ids)`` for each (seq_id, token_ids) in order, up to
        the first that is out of memory: the slots of those that grew (that one changed nothing)."""
        out = []
        for seq_id, token_ids in grows:
            slots = self.grow(seq_id, len(token_ids), token_ids)
            if slots is None:
                break
            out.append(slots)
        return out

    @abc.abstractmethod
    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        """Make ``child_id`` a copy of the parent's tokens; False when memory is short."""

    @abc.abstractmethod
    def free(self, seq_id: int) -> None:
        """Release a sequence (finished or preempted)."""

    def note_preempted(self, seq_id: int) -> None:
        """The engine preempted ``seq_id`` (it was freed, or is about to be): its later admissions
        are re-admissions, whose prefix lookups a prefix cache counts apart (``preempted_*``,
        ``allocators.prefix_stats``). Nothing to do for strategies without one."""

    def commit(self) -> None:
        """The tokens grown so far now hold their K/V: the engine calls this once the step that
        computes them has run. Until then a grown token only has a slot, so nothing may treat it
        as reusable (a sequence freed before the commit, e.g. a roll-back, leaves no cached K/V)."""

    # -- views -----------------------------------------------------------------------------
    @abc.abstractmethod
    def block_table(self, seq_id: int) -> list[int]:
        """Block ids (slot // block_size) holding the sequence's slots, in token order."""

    @abc.abstractmethod
    def num_tokens(self, seq_id: int) -> int:
        """Computed tokens of the sequence."""

    @abc.abstractmethod
    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        """Exact breakdown now; ``final_lens`` maps each live sequence to its true final length."""

    def _get(self, seq_id: int):
        """The live sequence record (subclasses keep them in ``self._seqs``)."""
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        return seq

    @property
    def max_seq_tokens(self) -> int:
        """The most tokens one sequence can ever hold (requests longer are rejected on arrival):
        the pool's slots, except for strategies whose groups drop old tokens."""
        return self.num_slots

    def cached_prefix_len(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` an admit now would find cached (read-only; the
        longest-prefix-match queue order asks it). 0 for allocators without a prefix cache."""
        return 0

    def take_page_ops(self) -> tuple[int, int]:
        """(page groups mapped, unmapped) since the last call; virtual-memory strategies only."""
        return 0, 0

    def take_copy_ops(self) -> list[CopyOp]:
        """Copies the engine must perform before the next forward; draining them."""
        ops, self._copy_ops = getattr(self, "_copy_ops", []), []
        return ops

    def live_sequences(self) -> list[int]:
        """Ids of the sequences currently admitted."""
        raise NotImplementedError

    def block_counts(self) -> tuple[int, int] | None:
        """``(per_sequence, distinct)``: blocks the live sequences' tables hold counted once per
        table (what they would hold without sharing), and distinct blocks they hold (with it);
        the paper's sharing saving is ``1 - distinct / per_sequence``. None where memory is not
        handed out in shareable blocks."""
        return None

    def stats(self) -> dict[str, float | int | None]:
        """Counters for the results; ``prefix_hit_rate`` is None where sharing does not apply."""
        return {"prefix_hit_rate": None, "prefix_queries": None, "prefix_hits": None}

    def check_invariants(self) -> None:
        """Expensive consistency checks (no slot owned twice, free + used == total, refs >= 0)."""


# -- small helpers shared by the strategies -------------------------------------------------
def check_block_size(block_size: int, num_slots: int) -> int:
    """A block size is a power of two and the pool holds at least one block."""
    check_length("num_slots", num_slots, 1)
    is_int = isinstance(block_size, int) and not isinstance(block_size, bool)
    if not is_int or block_size < 1 or block_size & (block_size - 1):
        raise AllocatorError(f"block_size must be a power of two >= 1, got {block_size!r}")
    if num_slots < block_size:
        raise AllocatorError(f"num_slots={num_slots} is smaller than one block (block_size={block_size})")
    return block_size


def refuse_never(live, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None,
                 unit_tokens: int, units: int, unit_name: str) -> Admission | None:
    """Checks every unit-granular admit shares: raises on bad input, returns the NEVER refusal
    (a prompt longer than ``max_len``, or needing more ``unit_name`` of ``unit_tokens`` tokens
    than the pool's ``units``), else None."""
    if seq_id in live:
        raise AllocatorError(f"sequence {seq_id} is already live")
    check_length("max_len", max_len, 1)
    if final_len is not None:
        check_length("final_len", final_len)
    if len(prompt) > max_len:
        return Admission(Fit.NEVER, f"prompt of {len(prompt)} tokens is longer than max_len={max_len}")
    need = ceil_div(len(prompt), unit_tokens)
    if need > units:
        return Admission(Fit.NEVER, f"prompt needs {need} {unit_name}; the pool has {units}")
    return None


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
