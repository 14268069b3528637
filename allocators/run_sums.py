"""The sequences of a decode run as the allocators' run books read them (``kvbench.engine.decode_run``).

In a run every sequence grows by one token a round, so the sums the books need move in step:
the tokens held grow by the sequences' count a round, a sequence takes a block in the rounds
its next token starts one (a histogram of positions in the last block, which rounds rotate),
and a sequence's final block has empty slots no token will fill from the round its tokens
reach that block on. ``RunSums`` keeps those sums from run to run, so a run costs a few
operations per round, not a pass over the sequences; dropping or adding sequences updates them.
Plain lists: a run holds a few to a few hundred sequences, where numpy's per-call cost is the
larger one.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import accumulate, compress

import numpy as np


class RunSums:
    """Ids, tokens held and final lengths of a run's sequences (in running order), and their sums:
    ``context`` (tokens held), ``blocks`` (blocks a table per sequence holds), ``takes`` (blocks
    taken by the next rounds) and ``internal`` (final-block slots no token will fill)."""

    __slots__ = ("block_size", "seq_ids", "tokens0", "final_lens", "context", "blocks", "rounds",
                 "_phases", "_keys", "_cum", "_dropped_waste", "alloc_cache")

    def __init__(self, seq_ids: Sequence[int], tokens: Sequence[int], finals: Sequence[int], block_size: int) -> None:
        mask, shift = block_size - 1, block_size.bit_length() - 1
        self.block_size = block_size
        self.seq_ids = list(seq_ids)
        self.tokens0 = _ints(tokens)  # each one's tokens when gathered: now, less ``rounds``
        self.final_lens = _ints(finals)
        self.context = sum(self.tokens0)
        self.blocks = sum([(t + mask) >> shift for t in self.tokens0])
        self.rounds = 0  # rounds since these sums were gathered
        self._phases = [0] * block_size  # sequences by position in their last block when gathered
        for t in self.tokens0:
            self._phases[t & mask] += 1
        self._keys: list[int] | None = None  # the final-block index, built when first read
        self.alloc_cache = None  # the allocator's own view of these sequences, dropped when they change

    def __len__(self) -> int:
        return len(self.seq_ids)

    @property
    def tokens(self) -> np.ndarray:
        """Each one's tokens held now, as an array."""
        return np.array(self.tokens0, dtype=np.int64) + self.rounds

    @property
    def finals(self) -> np.ndarray:
        return np.array(self.final_lens, dtype=np.int64)

    def tokens_now(self) -> list[int]:
        """Each one's tokens held now."""
        rounds = self.rounds
        return [t + rounds for t in self.tokens0]

    def _enters_and_waste(self, t0: int, final: int) -> tuple[int, int]:
        """The round (counted from the gather) a sequence's tokens reach its final block, and that
        block's slots no token will fill."""
        bs = self.block_size
        final_block = (final + bs - 1) & -bs
        return final_block - bs + 1 - t0, final_block - final

    def _index_waste(self) -> None:
        """The final-block waste sorted by the round each sequence's tokens reach that block, with prefix sums."""
        entries = sorted(map(self._enters_and_waste, self.tokens0, self.final_lens))
        self._keys = [enters for enters, _ in entries]
        self._cum = list(accumulate([waste for _, waste in entries], initial=0))
        self._dropped_waste = 0

    def takes(self, steps: int) -> list[int]:
        """Blocks taken by rounds 1..``steps`` from now, cumulative: round j's are the sequences
        whose next token starts a block, those at position 1 - j modulo the block size now."""
        mask, phases, since = self.block_size - 1, self._phases, self.rounds
        return list(accumulate(phases[(1 - j - since) & mask] for j in range(1, steps + 1)))

    def internal(self, steps: int) -> list[int]:
        """After each of rounds 1..``steps`` from now: the empty slots of the final blocks that
        the sequences' tokens have reached (no token will fill them)."""
        if self._keys is None:
            self._index_waste()
        keys, cum, since, dropped = self._keys, self._cum, self.rounds, self._dropped_waste
        return [cum[bisect.bisect_right(keys, since + j)] - dropped for j in range(1, steps + 1)]

    def at_block_start(self) -> int:
        """The sequences whose next token starts a block (no partial block now)."""
        return self._phases[-self.rounds & (self.block_size - 1)]

    def reached_waste(self) -> int:
        """The empty slots of the final blocks the sequences' tokens have reached now."""
        if self._keys is None:
            self._index_waste()
        return self._cum[bisect.bisect_right(self._keys, self.rounds)] - self._dropped_waste

    def advance(self, steps: int) -> None:
        """Every sequence grew by ``steps`` tokens."""
        if steps:
            self.blocks += self.takes(steps)[-1]
            self.context += len(self.seq_ids) * steps
            self.rounds += steps

    def keep(self, keep: list[bool]) -> None:
        """Keep the sequences marked True, in order."""
        gone = [not k for k in keep]
        self._forget(list(compress(self.tokens0, gone)), list(compress(self.final_lens, gone)))
        self.seq_ids, self.tokens0, self.final_lens = (
            list(compress(items, keep)) for items in (self.seq_ids, self.tokens0, self.final_lens))

    def keep_first(self, n: int) -> None:
        """Keep the first ``n`` sequences."""
        if n < len(self.seq_ids):
            self._forget(self.tokens0[n:], self.final_lens[n:])
            del self.seq_ids[n:], self.tokens0[n:], self.final_lens[n:]

    def _forget(self, tokens0: list[int], finals: list[int]) -> None:
        """Take sequences (their gathered tokens and final lengths) out of the sums."""
        self.alloc_cache = None
        mask, shift, since = self.block_size - 1, self.block_size.bit_length() - 1, self.rounds
        for t0 in tokens0:
            self.context -= t0 + since
            self.blocks -= (t0 + since + mask) >> shift
            self._phases[t0 & mask] -= 1
        if self._keys is None:
            return
        gone = list(map(self._enters_and_waste, tokens0, finals))
        if all(enters <= since for enters, _ in gone):  # each counted now and in every later round
            self._dropped_waste += sum(waste for _, waste in gone)
        else:
            self._keys = None  # indexed again when next read

    def insert(self, at: list[int], seq_ids: list[int], tokens: list[int], finals: list[int]) -> None:
        """Add sequences at places ``at`` (ascending, in the order after the insertion)."""
        mask, shift, since = self.block_size - 1, self.block_size.bit_length() - 1, self.rounds
        self.alloc_cache = None
        for i, seq_id, held, final in zip(at, seq_ids, tokens, finals):
            self.seq_ids.insert(i, seq_id)
            self.tokens0.insert(i, held - since)
            self.final_lens.insert(i, final)
            self.context += held
            self.blocks += (held + mask) >> shift
            self._phases[(held - since) & mask] += 1
        self._keys = None  # indexed again when next read


def _ints(values: Sequence[int]) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else [int(v) for v in values]
