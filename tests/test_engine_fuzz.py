"""Engine invariant fuzzer over random configurations: allocator and reserve policy, block size,
pool size, arrival rate, parallel samples, beams, preemption mode, swap space, chunking and
batch limits. Every case must run without an error, end every request finished or rejected
with a reason, keep the memory fractions summing to 1, let every sequence read back its own
tokens (token-pool executor) and finish every request that fits the empty pool alone.

A fast subset runs in ``make test``; the full sweep in ``make test-slow``.
"""
from __future__ import annotations

import random

import pytest

from tests.engine_helpers import ALLOCATOR_CONFIGS, checked_run, lost_requests, make_requests


def random_case(seed: int, eos: bool = False) -> dict:
    """One random engine configuration and workload (all plain values, so a failure prints it).
    ``eos``: a 12-token vocabulary with token 0 as the stop token, so samples stop early often
    (before, at and after forks, preemptions and swaps)."""
    rng = random.Random(seed)
    name, knobs = rng.choice(ALLOCATOR_CONFIGS)
    knobs = dict(knobs)
    knobs["block_size"] = rng.choice([1, 2, 4, 8] if name in ("contiguous", "buddy") else [1, 2, 4, 8, 16])
    if name == "vattention":  # pages of 1 to 4 blocks
        knobs["page_bytes"] = knobs["token_bytes"] * knobs["block_size"] * rng.choice([1, 2, 4])
    max_model_len = rng.choice([32, 48, 64])
    num_slots = max(knobs["block_size"], rng.randint(max_model_len // 2, 4 * max_model_len))
    if name == "vattention":
        knobs["reclaim"] = rng.choice(["unmap", "pool"])
        num_slots = max(num_slots, knobs["page_bytes"] // knobs["token_bytes"])
    gap = rng.choice([0.0, 0.1, 0.5, 2.0])
    specs = []
    for i in range(rng.randint(4, 12)):
        kind = rng.choice(["single", "single", "n", "beam"])
        width = rng.randint(2, 4)
        specs.append((rng.randint(1, max_model_len // 2), rng.randint(1, max_model_len // 2), round(gap * i, 3),
                      width if kind == "n" else 1, width if kind == "beam" else 1))
    cfg = {
        "max_model_len": max_model_len,
        "preemption": rng.choice(["recompute", "swap"]),
        "swap_slots": rng.choice([0, 16, 64, 512]),
        "chunked_prefill": rng.random() < 0.7,
        "max_num_batched_tokens": rng.choice([8, 16, 32, 64]),
        "max_num_seqs": rng.choice([2, 4, 8, 256]),
    }
    if eos:
        cfg["stop_token_ids"] = (0,)
        cfg["vocab_size"] = EOS_VOCAB
    return {"name": name, "knobs": knobs, "num_slots": num_slots, "specs": specs, "cfg": cfg, "seed": seed}


EOS_VOCAB = 12


def check_case(case: dict) -> None:
    requests = make_requests(case["specs"], vocab_size=case["cfg"].get("vocab_size", 1000), seed=case["seed"])
    lost = lost_requests(case["name"], case["knobs"], case["num_slots"], requests, **case["cfg"])
    assert lost == [], f"requests {lost} fit alone but were rejected under load: {case}"


@pytest.mark.parametrize("seed", range(20))
def test_engine_invariants_on_random_configs_fast(seed):
    check_case(random_case(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 420))
def test_engine_invariants_on_random_configs(seed):
    check_case(random_case(seed))


@pytest.mark.parametrize("seed", range(30))
def test_engine_invariants_with_stop_tokens_fast(seed):
    """Samples that stop at EOS (parallel samples whose first token is a stop, a parent that stops
    while its samples wait to fork, groups preempted and restored with stopped samples) once
    stalled the engine ("made no progress") or broke a restore; every case must now finish."""
    check_case(random_case(seed, eos=True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30, 630))
def test_engine_invariants_with_stop_tokens(seed):
    check_case(random_case(seed, eos=True))


# -- every preemption victim ---------------------------------------------------------------
OTHER_VICTIMS = ("least_computed", "most_blocks", "lowest_priority")
# Known failures, pinned as strict xfails: (victim, seed) -> reason. None at present.
KNOWN: dict[tuple[str, int], str] = {}
# Fixed, run in the fast tier: most_blocks on seed 37 (paged, 5 blocks of 16), where a request of
# 3 samples, out of memory as it grew, was its own victim each time it came back (it held the
# most blocks), until it ran alone in a restored state that needs 6 blocks and was rejected,
# although it fits an empty pool alone. It now takes the groups the step has not reached first
# (victims.py). Seed 13 (contiguous, double reserve) guards against taking every group the step
# scheduled before the grower (a beam that still does not fit), which rejected a 3-sample request.
REGRESSIONS = [("most_blocks", 37), ("most_blocks", 13)]


def _victim_case(victim: str, seed: int, eos: bool) -> dict:
    case = random_case(seed, eos=eos)
    case["cfg"]["preemption_victim"] = victim
    return case


def _params(seeds):
    return [pytest.param(v, s, marks=pytest.mark.xfail(strict=True, reason=KNOWN[v, s])) if (v, s) in KNOWN
            else (v, s) for v in OTHER_VICTIMS for s in seeds]


@pytest.mark.parametrize("victim,seed", _params(range(12)))
def test_engine_invariants_under_every_victim_fast(victim, seed):
    """The victim may be a request already scheduled in its step (its chunks taken back): every
    allocator, samples, beams, swap and chunking keep every token right."""
    check_case(_victim_case(victim, seed, eos=seed % 2 == 1))


@pytest.mark.parametrize("eos", [False, True])
@pytest.mark.parametrize("victim,seed", REGRESSIONS)
def test_engine_invariants_under_every_victim_regressions(victim, seed, eos):
    check_case(_victim_case(victim, seed, eos))


@pytest.mark.slow
@pytest.mark.parametrize("eos", [False, True])
@pytest.mark.parametrize("victim,seed", _params(range(12, 420)))
def test_engine_invariants_under_every_victim(victim, seed, eos):
    check_case(_victim_case(victim, seed, eos))
