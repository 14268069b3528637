"""The hf backend runs the same scheduler: under every preemption victim, with recompute and
with swap, and under every queue order, greedy outputs equal transformers' own ``generate``
(tiny-llama, float32, CPU; the fixtures of ``tests/test_hf_executor.py``)."""
from __future__ import annotations

import pytest

from kvbench.engine.scheduler import Scheduler
from kvbench.requests import Request
from tests.engine_helpers import make_requests
from tests.test_hf_executor import SPECS, engine_models, greedy, one_thread, reference, run  # noqa: F401

NAME = "tiny-llama"


def _requests(seed: int, specs=SPECS) -> list[Request]:
    return [Request(r.request_id, r.prompt_ids, r.output_len, r.arrival_s, priority=r.request_id % 2)
            for r in make_requests([(s[0], s[1], 0.0) for s in specs], vocab_size=256, seed=seed)]


@pytest.fixture
def taken_back(monkeypatch) -> list[int]:
    """Chunks the scheduler took back from victims scheduled earlier in their step, per call."""
    counts: list[int] = []
    unschedule = Scheduler._unschedule

    def counted(self, group, chunks, batch_counts):
        out = unschedule(self, group, chunks, batch_counts)
        counts.append(out[1])
        return out

    monkeypatch.setattr(Scheduler, "_unschedule", counted)
    return counts


# SPECS in an order where every victim but newest is, at least once, a request already scheduled
# in its step (most_blocks takes one only when the step has reached every request)
REACHING_BACK = [SPECS[i] for i in (0, 1, 4, 2, 5, 3)]


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("victim", ["newest", "lowest_priority", "least_computed", "most_blocks"])
def test_greedy_matches_generate_under_every_victim(victim, preemption, engine_models, reference, taken_back):
    """In this order every victim but newest is, once, a request already scheduled in its step:
    its chunks are taken back before it is preempted."""
    requests = _requests(seed=2, specs=REACHING_BACK)
    out, executor = run(NAME, engine_models, requests, "paged", {"block_size": 4}, num_slots=64,
                        preemption=preemption, swap_slots=4096, preemption_victim=victim)
    assert out.summary["num_preemptions"] > 0 and out.summary["num_finished"] == len(SPECS)
    assert greedy(out) == reference(NAME, requests)
    assert not executor.pool.host
    assert (sum(taken_back) > 0) == (victim != "newest")


@pytest.mark.parametrize("policy", ["priority", "sjf", "lpm"])
def test_greedy_matches_generate_under_every_queue_order(policy, engine_models, reference):
    requests = _requests(seed=3)
    out, _ = run(NAME, engine_models, requests, "paged_prefix", {"block_size": 4}, num_slots=64,
                 policy=policy, max_wait_s=2.0)
    assert out.summary["num_finished"] == len(SPECS)
    assert greedy(out) == reference(NAME, requests)
