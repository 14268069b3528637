"""Allocator bookkeeping of one engine step at steady state, 256 running sequences.

``pytest tests/benchmarks --benchmark-only``. The pool holds 256 sequences of the model's max
length (so even reserve=max runs 256 at once); a seeded chat-like stream (lognormal lengths,
a shared system prompt) keeps 256 sequences running. One step: free the sequences that
finished, admit waiting ones FCFS while fewer than 256 run and they fit (including the
prompt's slot mapping), then grow every running sequence by one token (preempting the most
recently admitted sequence when a grow is out of memory). usage() is benchmarked apart.
Target: a step under 1 ms for every strategy.
"""
from __future__ import annotations

import random
from collections import deque

import pytest

from allocators import Allocator, build
from allocators.fill import chat_request, system_prompt

MAX_RUNNING = 256
MAX_LEN = 2048
POOL = MAX_RUNNING * MAX_LEN
WARMUP_STEPS = 600

STRATEGIES = [
    pytest.param("contiguous", {"reserve": "max"}, id="contiguous-max"),
    pytest.param("contiguous", {"reserve": "oracle"}, id="contiguous-oracle"),
    pytest.param("contiguous", {"reserve": "double"}, id="contiguous-double"),
    pytest.param("buddy", {"reserve": "max"}, id="buddy-max"),
    pytest.param("buddy", {"reserve": "pow2"}, id="buddy-pow2"),
    pytest.param("buddy", {"reserve": "double"}, id="buddy-double"),
    pytest.param("paged", {"block_size": 16}, id="paged-16"),
    pytest.param("paged_prefix", {"block_size": 16}, id="paged_prefix-16"),
]


class SteadyStream:
    """A minimal FCFS engine loop around one allocator; only allocator calls cost time."""

    def __init__(self, alloc: Allocator, seed: int = 0) -> None:
        self.alloc = alloc
        self.rng = random.Random(seed)
        self.system = system_prompt(self.rng)
        self.waiting: deque[tuple[int, list[int], int]] = deque()
        self.running: dict[int, int] = {}  # seq -> final length, in admission order
        self.next_id = 0
        self.token = [7]

    def _refill(self) -> None:
        while len(self.waiting) < 64:
            prompt, final = chat_request(self.rng, self.system, MAX_LEN)
            self.waiting.append((self.next_id, prompt, final))
            self.next_id += 1

    def prepare(self) -> None:
        """Untimed: finish sequences and queue new requests."""
        alloc, running = self.alloc, self.running
        self.finished = [s for s, final in running.items() if alloc.num_tokens(s) >= final]
        self._refill()

    def step(self) -> None:
        alloc, running, waiting = self.alloc, self.running, self.waiting
        for seq in self.finished:
            alloc.free(seq)
            del running[seq]
        self.finished = []
        while waiting and len(running) < MAX_RUNNING:
            seq, prompt, final = waiting[0]
            admission = alloc.admit(seq, prompt, MAX_LEN, final)
            if not admission.ok:
                break
            waiting.popleft()
            cached = admission.num_cached_tokens
            alloc.grow(seq, len(prompt) - cached, prompt[cached:])
            running[seq] = final
        token = self.token
        grow = alloc.grow
        for seq in running:
            if grow(seq, 1, token) is None:
                self._preempt_and_retry(seq)
                break

    def _preempt_and_retry(self, stuck: int) -> None:
        """Out of memory (double / paged): preempt the newest until the rest can grow."""
        alloc, running = self.alloc, self.running
        order = list(running)
        for seq in order[order.index(stuck):]:
            while seq in running and alloc.grow(seq, 1, self.token) is None:
                victim = next(reversed(running))
                alloc.free(victim)
                final = running.pop(victim)
                self.waiting.appendleft((victim, [1] * 4, final))  # recomputed later; ids do not matter here

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.prepare()
            self.step()


def steady(name: str, knobs: dict) -> SteadyStream:
    if name in ("contiguous", "buddy"):
        knobs = {**knobs, "max_model_len": MAX_LEN}
    stream = SteadyStream(build(name, POOL, **knobs))
    stream.run(WARMUP_STEPS)
    assert len(stream.running) >= MAX_RUNNING * 0.9, len(stream.running)
    return stream


@pytest.mark.parametrize("name, knobs", STRATEGIES)
def test_bench_engine_step(benchmark, name, knobs):
    stream = steady(name, knobs)
    benchmark.group = "allocator step, 256 running"
    benchmark.pedantic(stream.step, setup=stream.prepare, rounds=400, iterations=1, warmup_rounds=5)


@pytest.mark.parametrize("name, knobs", STRATEGIES)
def test_bench_usage(benchmark, name, knobs):
    stream = steady(name, knobs)
    finals = dict(stream.running)
    benchmark.group = "allocator usage(), 256 running"
    usage = benchmark.pedantic(stream.alloc.usage, args=(finals,), rounds=200, iterations=1, warmup_rounds=5)
    assert usage.total == POOL
