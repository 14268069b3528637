"""Pressure suite: on small pools, every request that fits an empty pool alone finishes under
load, for every allocator, both preemption modes, parallel samples and beams.

A request "fits alone" when it finishes run alone under the same configuration; the token-pool
executor samples from the context, so it generates the same tokens alone and under load.
"""
from __future__ import annotations

import random

import pytest

from tests.engine_helpers import ALLOCATOR_CONFIGS, checked_run, fits_alone, make_requests

POOL_SLOTS = {"contiguous": 96, "buddy": 96, "paged": 48, "paged_prefix": 48, "radix": 48, "vattention": 64}  # regions reserve more
LIMITS = {"max_model_len": 32, "max_num_batched_tokens": 32}


def pressure_requests(seed: str, kind: str, count: int = 10):
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        width = rng.randint(2, 3)
        specs.append((rng.randint(3, 14), rng.randint(2, 9), 0.25 * i,
                      width if kind == "n" else 1, width if kind == "beam" else 1))
    return make_requests(specs, seed=len(seed))


@pytest.mark.parametrize("name,knobs", ALLOCATOR_CONFIGS)
@pytest.mark.parametrize("preemption,swap_slots", [("recompute", 0), ("swap", 64)])
@pytest.mark.parametrize("kind", ["n", "beam"])
def test_every_request_that_fits_alone_finishes_under_pressure(name, knobs, preemption, swap_slots, kind):
    requests = pressure_requests(f"{name}{knobs}{preemption}{kind}", kind)
    cfg = dict(LIMITS, preemption=preemption, swap_slots=swap_slots)
    num_slots = POOL_SLOTS[name]
    out = checked_run(name, knobs, num_slots, requests, **cfg)
    status = out.requests.set_index("request_id")["status"]
    fit = [r.request_id for r in requests if fits_alone(name, knobs, num_slots, r, **cfg)]
    assert len(fit) >= len(requests) // 2  # the suite tests something
    assert [rid for rid in fit if status.loc[rid] != "finished"] == []
    assert out.summary["num_preemptions"] > 0 or name in ("contiguous", "buddy")
