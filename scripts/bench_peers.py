"""Per-op cost of kvbench's strategies against the engines' own managers, side by side.

    PYTHONPATH=. python scripts/bench_peers.py [--rounds 200]

Each pair runs the same seeded steady stream (``tests/benchmarks/test_bench_allocators``: 256
running sequences, chat-like lengths with a shared system prompt, so admits hit the prefix
cache). Rounds alternate between the two sides; every seam call is timed, and the table gives
the median over rounds of microseconds per call and per step, and their ratio (kvbench / peer).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocators import build  # noqa: E402
from kvbench.peers import build_peer  # noqa: E402
from tests.benchmarks.test_bench_allocators import POOL, WARMUP_STEPS, SteadyStream  # noqa: E402

OPS = ("admit", "grow", "free", "commit")
PAIRS = [
    ("paged_prefix-16", lambda: build("paged_prefix", POOL, block_size=16),
     "vllm-v1-16 (caching)", lambda: build_peer("vllm-v1", POOL, block_size=16, cache_at="commit")),
    ("paged-16", lambda: build("paged", POOL, block_size=16),
     "vllm-v1-16 (no caching)", lambda: build_peer("vllm-v1", POOL, block_size=16, enable_caching=False)),
]


class Timed:
    """Forwards to an allocator, adding each seam call's time to ``spent[op]``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __getattr__(self, name):
        target = getattr(self.inner, name)
        if name not in OPS:
            return target
        spent, calls, clock = self.spent, self.calls, time.perf_counter

        def timed(*args):  # noqa: ANN202
            t0 = clock()
            out = target(*args)
            spent[name] += clock() - t0
            calls[name] += 1
            return out

        return timed


def measure(make, rounds: int):
    stream = SteadyStream(make())
    for _ in range(WARMUP_STEPS):
        stream.prepare()
        stream.step()
        stream.alloc.commit()
    timed = Timed(stream.alloc)
    stream.alloc = timed
    for _ in range(rounds):
        stream.prepare()
        timed.spent.clear()
        timed.calls.clear()
        t0 = time.perf_counter()
        stream.step()
        timed.commit()  # the step's forward ran: prefix caches hash its full blocks
        step = time.perf_counter() - t0
        yield step, {op: (timed.spent[op], timed.calls[op]) for op in OPS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print("| kvbench | peer | op | kvbench us/call | peer us/call | kvbench / peer |")
    print("|---|---|---|---|---|---|")
    for ours_name, ours, peer_name, peer in PAIRS:
        sides = [measure(ours, args.rounds), measure(peer, args.rounds)]
        rows: dict[str, list[list[float]]] = defaultdict(lambda: [[], []])
        for _ in range(args.rounds):
            for side, gen in enumerate(sides):  # alternate: drift hits both sides alike
                step, ops = next(gen)
                rows["step (256 running)"][side].append(step)
                for op, (spent, calls) in ops.items():
                    if calls:
                        rows[op][side].append(spent / calls)
        for op, (a, b) in rows.items():
            if a and b:
                ma, mb = statistics.median(a) * 1e6, statistics.median(b) * 1e6
                print(f"| {ours_name} | {peer_name} | {op} | {ma:.1f} | {mb:.1f} | {ma / mb:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
