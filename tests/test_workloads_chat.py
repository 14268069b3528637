"""Multi-turn chat and shared system prompts: history as prefix, timing, Zipf draw, knobs."""
from __future__ import annotations

import numpy as np
import pytest

from kvbench.workloads import WorkloadError, build_workload
from kvbench.workloads.multiturn import load_turns

VOCAB = 1000


def build(max_model_len: int = 2048, **cfg):
    return build_workload(cfg, vocab_size=VOCAB, max_model_len=max_model_len, tokenizer_name=None)


def test_each_turn_starts_with_the_previous_prompt_and_reply():
    w = build(name="multiturn", num_requests=60, request_rate=0.5, think_time_dist="fixed", think_time_s=3.0,
              dependent=False)
    reqs = w.requests
    assert len(reqs) == 60 and [r.request_id for r in reqs] == list(range(60))
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
    follow_ups = 0
    for r in reqs:  # a follow-up turn: an earlier request's prompt + reply ids are its prefix
        for q in reqs:
            if q is not r and len(q.prompt_ids) + q.output_len < len(r.prompt_ids) \
                    and r.prompt_ids[:len(q.prompt_ids)] == q.prompt_ids:
                follow_ups += 1
                # it arrives after q's expected finish plus the fixed think time
                assert r.arrival_s >= q.arrival_s + q.output_len * 0.05 + 3.0 - 1e-9
                break
    assert follow_ups >= 20
    assert w.meta["conversations"] < 60 and w.meta["mean_turns"] > 1


def test_conversations_end_where_they_no_longer_fit_the_model():
    w = build(name="multiturn", num_requests=200, max_model_len=512)
    assert all(r.prompt_len + r.output_len <= 512 for r in w.requests)
    assert max(len(c) for c in load_turns()) > 8  # the table has long chats; max_turns cuts them
    assert build(name="multiturn", num_requests=50, max_turns=1).meta["mean_turns"] == 1.0


def test_dependent_turns_ride_on_their_first_turn_with_fresh_ids():
    w = build(name="multiturn", num_requests=60, request_rate=0.5)
    chains = []
    for r in w.requests:
        follow, chain = r.follow_up, []
        while follow is not None:
            chain.append(follow)
            follow = follow.next
        chains.append(chain)
    ids = [r.request_id for r in w.requests] + [f.request_id for c in chains for f in c]
    assert sorted(ids) == list(range(60)) and w.meta["num_turns"] == 60
    assert len(w.requests) == w.meta["conversations"] < 60 and any(chains)


def test_multiturn_bad_knobs_fail_in_one_line():
    with pytest.raises(WorkloadError, match="think_time_dist"):
        build(name="multiturn", think_time_dist="gamma")
    with pytest.raises(WorkloadError, match="max_turns"):
        build(name="multiturn", max_turns=0)


def test_system_prompts_are_drawn_by_zipf_and_prefix_every_request():
    w = build(name="system_prompts", num_requests=400, source="table", system_prompt_lens=[100, 200, 300], zipf_s=1.5)
    counts = w.meta["system_prompt_counts"]
    assert sum(counts) == 400 and counts[0] > counts[1] > counts[2] > 0
    heads = {tuple(r.prompt_ids[:100]) for r in w.requests}
    assert len(heads) == 3  # every request starts with one of the three system prompts
    assert all(r.prompt_len + r.output_len <= 2048 for r in w.requests)
    uniform = build(name="system_prompts", num_requests=3000, source="table", system_prompt_lens=[10] * 4, zipf_s=0.0)
    assert np.ptp(uniform.meta["system_prompt_counts"]) < 150


def test_system_prompts_bad_lengths_fail_in_one_line():
    with pytest.raises(WorkloadError, match="system_prompt_lens"):
        build(name="system_prompts", source="table", system_prompt_lens=[])
    with pytest.raises(WorkloadError, match="system_prompt_lens"):
        build(name="system_prompts", source="table", system_prompt_lens=[4000])
