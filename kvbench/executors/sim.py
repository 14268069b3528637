"""Simulated executor (``backend=sim``): no model runs, the step time comes from the cost model.

Tokens are placeholders from a seeded ``random.Random``: deterministic given the seed and the
sequence of batches. ``execute`` is O(chunks + copy/swap ops) in plain Python.
"""
from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence

import numpy as np

from kvbench.batch import StepBatch, StepResult
from kvbench.geometry import KVGeometry
from kvbench.hf.cost_view import cost_params
from kvbench.sim.cost_model import (
    TIMING_KEYS, cost_fit_source, decode_run_times, op_constants_source, step_time, summarize,
)
from kvbench.sim.padding import padded_summary

DRAWS_AT_ONCE = 64  # from this many draws on, one getrandbits call is faster than the loop


class SimExecutor:
    """Models one engine step of ``model_cfg`` on ``gpu_cfg`` (``gpu_cfg.count`` GPUs in TP)."""

    needs_block_tables = False  # the cost model reads block_size and context lengths only

    def __init__(self, model_cfg, gpu_cfg, seed: int = 0, system_cfg=None, *, geometry: KVGeometry):
        # MoE, MLA: kvbench.hf.cost_view; ``geometry``: the run spec's (every KV byte count)
        self.params = cost_params(model_cfg, gpu_cfg, system_cfg, geometry=geometry)
        log = logging.getLogger("kvbench")
        if cost_fit_source(gpu_cfg) == str(getattr(gpu_cfg, "name", "?")):
            log.info("%s", op_constants_source(gpu_cfg))
        else:  # the step times are another GPU's fit: say so once, where a user reads warnings
            log.warning("%s", op_constants_source(gpu_cfg))
        self.vocab_size = int(model_cfg.vocab_size)
        self._rng = random.Random(seed)

    def execute(self, batch: StepBatch) -> StepResult:
        summary = summarize(batch)
        padding = getattr(batch, "padding", None)  # a padded static batch computes more than its chunks
        if padding is not None:
            summary = padded_summary(summary, padding)
        times = step_time(self.params, summary)
        next_tokens: dict[int, int] = {}
        top_logprobs: dict[int, list[tuple[int, float]]] = {}
        extra_tokens: dict[int, list[int]] = {}
        rand, vocab = self._rng.random, self.vocab_size
        chunks, counts = batch.chunks, batch.counts
        if counts is not None and counts.num_ranked == 0 and counts.num_draws == counts.num_sampled == len(chunks):
            # every chunk samples one token: the loop below, draw for draw
            next_tokens = {chunk.seq_id: int(rand() * vocab) for chunk in chunks}
            chunks = ()
        for chunk in chunks:
            if not chunk.sample:
                continue
            if chunk.num_logprobs > 0:
                candidates = self._candidates(chunk.num_logprobs)
                top_logprobs[chunk.seq_id] = candidates
                next_tokens[chunk.seq_id] = candidates[0][0]
            else:
                next_tokens[chunk.seq_id] = int(rand() * vocab)
            if chunk.num_samples > 1:
                extra_tokens[chunk.seq_id] = [int(rand() * vocab) for _ in range(chunk.num_samples - 1)]
        return StepResult(
            next_tokens=next_tokens,
            duration_s=times["duration_s"],
            top_logprobs=top_logprobs,
            extra_tokens=extra_tokens,
            timings={key: times[key] for key in TIMING_KEYS},
        )

    def decode_run_times(self, num_seqs: int, decode_pairs: Sequence[int], decode_blocks: Sequence[int],
                         block_size: int) -> dict[str, list[float]]:
        """``execute``'s duration and timings for each step of a decode run
        (``kvbench.engine.decode_run``): ``num_seqs`` one-token sampling chunks, no copy, page or
        swap work; its tokens come from ``draw_tokens``."""
        return decode_run_times(self.params, block_size, num_seqs, decode_pairs, decode_blocks)

    def draw_tokens(self, count: int) -> list[int]:
        """The next ``count`` placeholder tokens, the very draws ``execute`` would make one by one
        (``int(random() * vocab)``). Many at once come from one ``getrandbits`` call: its 32-bit
        words are the generator's next outputs in order (least significant first), and
        ``random()`` makes a double of two of them as below, so the values and the generator's
        state after them are the loop's."""
        if count < DRAWS_AT_ONCE:
            rand, vocab = self._rng.random, self.vocab_size
            return [int(rand() * vocab) for _ in range(count)]
        words = np.frombuffer(self._rng.getrandbits(64 * count).to_bytes(8 * count, "little"), dtype="<u4")
        doubles = ((words[0::2] >> 5) * 67108864.0 + (words[1::2] >> 6)) * (1.0 / 9007199254740992.0)
        return (doubles * self.vocab_size).astype(np.int64).tolist()

    def _candidates(self, k: int) -> list[tuple[int, float]]:
        """k distinct tokens with descending logprobs of a valid distribution (sum of probs < 1):
        normalised exponential draws, the (k+1)-th standing for the rest of the vocabulary.

        The draws of ``random.sample(range(vocab), k)`` and ``k + 1`` of ``expovariate(1.0)``,
        inline: where the vocabulary is larger than sample's small-set bound, sample rejects
        ``getrandbits(vocab.bit_length())`` draws at or past the vocabulary or already taken,
        and expovariate is ``-log(1 - random())``; ``tests/test_sim_executor.py`` holds this to
        the library's calls draw for draw."""
        rng = self._rng
        vocab = self.vocab_size
        k = min(k, vocab)
        if vocab <= _sample_set_bound(k):
            tokens = rng.sample(range(vocab), k)
        else:
            getrandbits, bits, tokens = rng.getrandbits, vocab.bit_length(), []
            while len(tokens) < k:
                j = getrandbits(bits)
                if j < vocab and j not in tokens:
                    tokens.append(j)
        rand, log = rng.random, math.log
        weights = [-log(1.0 - rand()) / 1.0 + 1e-12 for _ in range(k + 1)]
        total = sum(weights)
        probs = sorted((w / total for w in weights[:k]), reverse=True)
        return [(t, log(p)) for t, p in zip(tokens, probs)]


def _sample_set_bound(k: int) -> int:
    """The population size up to which ``random.sample`` draws ``k`` from a list pool, past
    which from a set of those taken (CPython's bound)."""
    return 21 + (4 ** math.ceil(math.log(k * 3, 4)) if k > 5 else 0)
