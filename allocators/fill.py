"""Fill one pool with each strategy and print how many sequences it holds and where memory goes.

    python -m allocators.fill [--slots 16384] [--max-model-len 2048] [--requests 600] [--seed 0]

Every strategy sees the same seeded chat-like stream (lognormal prompt and output lengths,
clipped; every prompt opens with the same 64-token system prompt, so prefix caching has
something to find). One step: admit waiting requests first-come-first-served while they fit
(a request that can never fit is rejected), compute each new prompt, grow every running
sequence by one token, free the finished ones. When a grow is out of memory the most
recently admitted sequence is preempted (freed and queued again at the front, to be
recomputed), and the next step admits nothing new. The breakdown is averaged over steps,
each step weighing the same.
"""
from __future__ import annotations

import argparse
import math
import random
import time
from collections import deque
from dataclasses import dataclass

from allocators import Allocator, build

CONFIGS: list[tuple[str, str, dict]] = [
    ("contiguous/max", "contiguous", {"reserve": "max"}),
    ("contiguous/pow2", "contiguous", {"reserve": "pow2"}),
    ("contiguous/oracle", "contiguous", {"reserve": "oracle"}),
    ("contiguous/double", "contiguous", {"reserve": "double"}),
    ("buddy/max", "buddy", {"reserve": "max"}),
    ("buddy/pow2", "buddy", {"reserve": "pow2"}),
    ("buddy/oracle", "buddy", {"reserve": "oracle"}),
    ("paged/16", "paged", {"block_size": 16}),
    ("paged_prefix/16", "paged_prefix", {"block_size": 16}),
]
SYSTEM_PROMPT_LEN = 64


@dataclass(slots=True)
class Stream:
    prompts: list[list[int]]
    final_lens: list[int]


def system_prompt(rng: random.Random) -> list[int]:
    return [rng.randrange(32000) for _ in range(SYSTEM_PROMPT_LEN)]


def chat_request(rng: random.Random, system: list[int], max_len: int) -> tuple[list[int], int]:
    """(prompt ids, final length): lognormal prompt (median 160, clipped to [4, max_len / 2])
    and output (median 200, clipped to [4, max_len - prompt]) lengths; the prompt opens with
    ``system`` (all of it but the last prompt token, at most)."""
    prompt_len = min(max(int(rng.lognormvariate(math.log(160), 1.0)), 4), max_len // 2)
    output_len = min(max(int(rng.lognormvariate(math.log(200), 0.9)), 4), max_len - prompt_len)
    head = system[: min(len(system), prompt_len - 1)]
    return head + [rng.randrange(32000) for _ in range(prompt_len - len(head))], prompt_len + output_len


def chat_stream(num_requests: int, max_len: int, seed: int = 0) -> Stream:
    rng = random.Random(seed)
    system = system_prompt(rng)
    requests = [chat_request(rng, system, max_len) for _ in range(num_requests)]
    return Stream([p for p, _ in requests], [f for _, f in requests])


def fill(alloc: Allocator, stream: Stream, max_len: int) -> dict[str, float]:
    waiting = deque(range(len(stream.prompts)))
    running: dict[int, int] = {}  # seq id -> final length, in admission order
    held_sum = held_max = steps = preemptions = rejected = 0
    fractions = dict.fromkeys(("token", "reserved", "internal", "external"), 0.0)
    short = False  # a grow ran out of memory in the last step: admit nothing new
    while waiting or running:
        while waiting and (not short or not running):
            seq = waiting[0]
            prompt, final = stream.prompts[seq], stream.final_lens[seq]
            admission = alloc.admit(seq, prompt, max_len, final)
            if admission.fit.value == "never":
                waiting.popleft()
                rejected += 1
                continue
            if not admission.ok:
                break
            waiting.popleft()
            cached = admission.num_cached_tokens
            assert alloc.grow(seq, len(prompt) - cached, prompt[cached:]) is not None
            running[seq] = final
        if not running:
            raise RuntimeError("nothing fits in an empty pool")
        short = False
        for seq in list(running):
            if seq not in running:
                continue  # preempted below in this step
            while alloc.grow(seq, 1, [seq & 0x7FFF]) is None:
                victim = next(reversed(running))
                alloc.free(victim)
                del running[victim]
                waiting.appendleft(victim)
                preemptions += 1
                short = True
                if victim == seq:
                    break
        usage = alloc.usage(running)
        for key in fractions:
            fractions[key] += getattr(usage, key) / usage.total
        held_sum += len(running)
        held_max = max(held_max, len(running))
        steps += 1
        for seq in [s for s, final in running.items() if alloc.num_tokens(s) >= final]:
            alloc.free(seq)
            del running[seq]
    stats = alloc.stats()
    return {
        "mean_held": held_sum / steps,
        "max_held": held_max,
        **{k: v / steps for k, v in fractions.items()},
        "steps": steps,
        "preemptions": preemptions,
        "rejected": rejected,
        "hit_rate": stats["prefix_hit_rate"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=16384)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    stream = chat_stream(args.requests, args.max_model_len, args.seed)
    print(f"pool {args.slots} slots, max_model_len {args.max_model_len}, {args.requests} requests, seed {args.seed}")
    header = (
        f"{'strategy':<18} {'mean held':>9} {'max held':>8} {'token':>6} {'reserved':>8} {'internal':>8} "
        f"{'external':>8} {'steps':>6} {'preempt':>7} {'hits':>5} {'s':>5}"
    )
    print(header)
    print("-" * len(header))
    for label, name, knobs in CONFIGS:
        if name in ("contiguous", "buddy"):
            knobs = {**knobs, "max_model_len": args.max_model_len}
        start = time.perf_counter()
        row = fill(build(name, args.slots, **knobs), stream, args.max_model_len)
        hits = "-" if row["hit_rate"] is None else f"{row['hit_rate']:.2f}"
        print(
            f"{label:<18} {row['mean_held']:>9.1f} {row['max_held']:>8d} {row['token']:>6.3f} {row['reserved']:>8.3f} "
            f"{row['internal']:>8.3f} {row['external']:>8.3f} {row['steps']:>6d} {row['preemptions']:>7d} {hits:>5} "
            f"{time.perf_counter() - start:>5.1f}"
        )


if __name__ == "__main__":
    main()
