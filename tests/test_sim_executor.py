"""The simulator's placeholder draws, done inline, are the library's draws bit for bit."""
from __future__ import annotations

import math
import random

import pytest

from kvbench.executors.sim import SimExecutor


def _library_candidates(rng: random.Random, vocab: int, k: int) -> list[tuple[int, float]]:
    """``SimExecutor._candidates`` as random.sample and expovariate give it."""
    k = min(k, vocab)
    tokens = rng.sample(range(vocab), k)
    weights = [rng.expovariate(1.0) + 1e-12 for _ in range(k + 1)]
    total = sum(weights)
    probs = sorted((w / total for w in weights[:k]), reverse=True)
    return [(t, math.log(p)) for t, p in zip(tokens, probs)]


@pytest.mark.parametrize("vocab", [2, 20, 90, 1000, 50272, 128256])
def test_candidates_are_the_library_draws(vocab):
    executor = SimExecutor.__new__(SimExecutor)  # the draws need no cost model
    executor.vocab_size = vocab
    for seed in range(5):
        executor._rng, twin = random.Random(seed), random.Random(seed)
        for k in (1, 2, 4, 5, 6, 8, 12, 24, 3):
            assert executor._candidates(k) == _library_candidates(twin, vocab, k)
        assert executor._rng.random() == twin.random()  # the generator is where the library leaves it
