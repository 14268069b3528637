"""The per-step sums the scheduler keeps as it builds a batch (``BatchCounts``) equal the sums
over the batch's chunks, in every kind of step: prefill chunks, plain decodes, samples, beams,
preemption and swaps."""
from __future__ import annotations

import pytest

from kvbench.batch import BatchCounts
from tests.engine_helpers import make_requests
from tests.test_engine import make_engine


def counted(batch) -> BatchCounts:
    fresh = BatchCounts()
    fresh.add(batch.chunks, batch.block_size)
    fresh.num_requests = len({c.request_id for c in batch.chunks})
    return fresh


@pytest.mark.parametrize("name,knobs,preemption", [
    ("paged", {"block_size": 4}, "recompute"),
    ("paged_prefix", {"block_size": 4}, "swap"),
    ("buddy", {"reserve": "double"}, "recompute"),
])
def test_kept_counts_equal_the_sums_over_chunks(name, knobs, preemption):
    specs = [(3 + 5 * (i % 4), 2 + i % 9, 0.0, 3 if i % 5 == 1 else 1, 2 if i % 5 == 3 else 1) for i in range(16)]
    engine, ex = make_engine(name, 96, knobs=knobs, max_num_batched_tokens=24, preemption=preemption, swap_slots=128)
    out = engine.run(make_requests(specs, seed=1))
    assert out.summary["num_finished"] >= 12 and out.summary["num_preemptions"] > 0
    batches = ex.batches
    assert any(len(b.chunks) > 1 and b.counts.decode_pairs for b in batches)  # plain decodes were counted
    assert any(b.counts.prefill_pairs for b in batches) and any(b.counts.num_ranked for b in batches)
    for step, batch in enumerate(batches):
        assert batch.counts == counted(batch), f"step {step}"
