"""The sequences of a decode run as the allocators' run books read them (``kvbench.engine.decode_run``).

In a run every sequence grows by one token a round, so the sums the books need move in step:
the tokens held grow by the sequences' count a round, a sequence takes a block in the rounds
its next token starts one (a histogram of positions in the last block, which rounds rotate),
and a sequence's final block has empty slots no token will fill from the round its tokens
reach that block on. ``RunSums`` keeps those sums from run to run, so a run costs a few
operations per round, not a pass over the sequences; dropping sequences updates them.
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

    __slots__ = ("block_size", "seq_ids", "tokens", "finals", "context", "blocks", "rounds",
                 "_phases", "_enters", "_waste", "_keys", "_cum", "_dropped_waste", "alloc_cache")

    def __init__(self, seq_ids: Sequence[int], tokens: np.ndarray, finals: np.ndarray, block_size: int) -> None:
        mask, shift = block_size - 1, block_size.bit_length() - 1
        self.block_size = block_size
        self.seq_ids = list(seq_ids)
        self.tokens = tokens
        self.finals = finals
        self.context = int(tokens.sum())
        self.blocks = int(((tokens + mask) >> shift).sum())
        self.rounds = 0  # rounds since these sums were gathered
        self._phases = np.bincount(tokens & mask, minlength=block_size).tolist()  # by position at round 0
        self._keys: list[int] | None = None  # the final-block index, built when first read
        self.alloc_cache = None  # the allocator's own view of these sequences, dropped when they change

    def _index_waste(self) -> None:
        """Each sequence's final-block waste by the round (counted from the gather) its tokens
        reach that block, sorted by round, with prefix sums."""
        bs = self.block_size
        final_block = (self.finals + bs - 1) >> (bs.bit_length() - 1) << (bs.bit_length() - 1)
        self._enters = final_block - bs + 1 - (self.tokens - self.rounds)
        self._waste = final_block - self.finals  # the final block's slots no token will fill
        order = np.argsort(self._enters, kind="stable")
        self._keys = self._enters[order].tolist()
        self._cum = list(accumulate(self._waste[order].tolist(), initial=0))
        self._dropped_waste = 0

    def __len__(self) -> int:
        return len(self.seq_ids)

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
            self.tokens = self.tokens + steps
            self.rounds += steps

    def keep(self, keep: list[bool]) -> None:
        """Keep the sequences marked True, in order."""
        kept = np.array(keep, dtype=bool)
        self._drop(~kept, kept)
        self.seq_ids = list(compress(self.seq_ids, keep))

    def keep_first(self, n: int) -> None:
        """Keep the first ``n`` sequences."""
        if n < len(self.seq_ids):
            self._drop(slice(n, None), slice(0, n))
            del self.seq_ids[n:]

    def _drop(self, gone, kept) -> None:
        """Take the sequences at ``gone`` out of the sums and the arrays (``kept``: the others)."""
        mask, shift, since = self.block_size - 1, self.block_size.bit_length() - 1, self.rounds
        self.alloc_cache = None
        tokens = self.tokens[gone]
        self.context -= int(tokens.sum())
        self.blocks -= int(((tokens + mask) >> shift).sum())
        for phase in ((tokens - since) & mask).tolist():
            self._phases[phase] -= 1
        self.tokens, self.finals = self.tokens[kept], self.finals[kept]
        if self._keys is None:
            return
        if (self._enters[gone] <= since).all():  # each counted now and in every later round
            self._dropped_waste += int(self._waste[gone].sum())
            self._enters, self._waste = self._enters[kept], self._waste[kept]
        else:
            self._index_waste()

    def insert(self, at: list[int], seq_ids: list[int], tokens: list[int], finals: list[int]) -> None:
        """Add sequences at places ``at`` (ascending, in the order after the insertion)."""
        mask, shift, since = self.block_size - 1, self.block_size.bit_length() - 1, self.rounds
        self.alloc_cache = None
        for i, seq_id, held in zip(at, seq_ids, tokens):
            self.seq_ids.insert(i, seq_id)
            self.context += held
            self.blocks += (held + mask) >> shift
            self._phases[(held - since) & mask] += 1
        before = [i - k for k, i in enumerate(at)]  # the places in the arrays as they are
        self.tokens = np.insert(self.tokens, before, tokens)
        self.finals = np.insert(self.finals, before, finals)
        self._keys = None  # indexed again when next read
