"""Scheduler and engine behaviour on tiny pools, with exact expected batches."""
from __future__ import annotations

import pytest

from allocators import build
from kvbench.engine import Engine, SchedulerConfig
from tests.engine_helpers import TokenPoolExecutor, make_requests, seq_lookup

ALLOCATORS = [
    ("contiguous", {"reserve": "max"}),
    ("contiguous", {"reserve": "pow2"}),
    ("contiguous", {"reserve": "oracle"}),
    ("contiguous", {"reserve": "double"}),
    ("buddy", {"reserve": "max"}),
    ("buddy", {"reserve": "pow2"}),
    ("buddy", {"reserve": "oracle"}),
    ("paged", {"block_size": 1}),
    ("paged", {"block_size": 4}),
    ("paged_prefix", {"block_size": 4}),
    ("radix", {"block_size": 1}),
    ("radix", {"block_size": 4}),
    ("vattention", {"block_size": 4, "page_bytes": 64, "token_bytes": 4}),
]


def make_engine(name, num_slots, max_model_len=64, **cfg):
    knobs = dict(cfg.pop("knobs", {}))
    if name in ("contiguous", "buddy"):
        knobs.setdefault("max_model_len", max_model_len)
        knobs.setdefault("block_size", 4)
    allocator = build(name, num_slots, debug=True, **knobs)
    executor = TokenPoolExecutor(num_slots)
    engine = Engine(allocator, executor, SchedulerConfig(max_model_len=max_model_len, **cfg), max_steps=5000)
    executor.lookup = seq_lookup(engine)
    return engine, executor


def batches(executor):
    return [[(c.request_id, c.start_pos, c.query_len) for c in b.chunks] for b in executor.batches]


def test_fcfs_admission_and_token_budget_with_chunked_prefill():
    engine, ex = make_engine("paged", 64, max_num_batched_tokens=8, knobs={"block_size": 4})
    engine.run(make_requests([(5, 2), (5, 2), (5, 2)]))
    assert batches(ex) == [
        [(0, 0, 5), (1, 0, 3)],  # r1's prompt is chunked to fit the budget of 8
        [(0, 5, 1), (1, 3, 2), (2, 0, 5)],  # r0 decodes, r1 finishes its prompt, r2 fits whole
        [(1, 5, 1), (2, 5, 1)],  # r0 finished after its 2 tokens
    ]


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget():
    engine, ex = make_engine("paged", 64, max_num_batched_tokens=8, chunked_prefill=False, knobs={"block_size": 4})
    out = engine.run(make_requests([(5, 2), (5, 2), (9, 1)]))
    assert batches(ex)[:3] == [[(0, 0, 5)], [(0, 5, 1), (1, 0, 5)], [(1, 5, 1)]]
    assert out.summary["num_rejected"] == 1  # 9 > budget 8 can never be scheduled
    assert out.requests.set_index("request_id").loc[2, "status"] == "rejected"


def test_max_num_seqs_caps_the_batch():
    engine, ex = make_engine("paged", 256, max_num_seqs=2, knobs={"block_size": 4})
    out = engine.run(make_requests([(3, 4)] * 5))
    assert max(len(b.chunks) for b in ex.batches) == 2
    assert out.summary["num_finished"] == 5


def test_preempts_the_most_recent_arrival_and_recomputes():
    # 4 blocks of 4 slots; two requests of 6-token prompts grow to 14 tokens: they cannot both fit
    engine, ex = make_engine("paged", 16, knobs={"block_size": 4})
    reqs = make_requests([(6, 8, 0.0), (6, 8, 0.5)])
    out = engine.run(reqs)
    req = out.requests.set_index("request_id")
    assert req.loc[1, "num_preemptions"] >= 1 and req.loc[0, "num_preemptions"] == 0
    assert out.summary["num_finished"] == 2
    assert [len(out.outputs[i][0]) for i in (0, 1)] == [8, 8]
    # after the preemption r1 is recomputed from scratch: prompt plus generated tokens
    recompute = [c for b in ex.batches for c in b.chunks if c.request_id == 1 and c.start_pos == 0]
    assert len(recompute) == 2 and recompute[1].query_len > 6


def test_swap_round_trip_restores_the_same_tokens():
    engine, ex = make_engine("paged", 16, preemption="swap", swap_slots=64, knobs={"block_size": 4})
    out = engine.run(make_requests([(6, 8, 0.0), (6, 8, 0.5)]))
    assert out.summary["num_preemptions"] >= 1
    swaps_out = sum(len(op.slots) for b in ex.batches for op in b.swap_out)
    swaps_in = sum(len(op.slots) for b in ex.batches for op in b.swap_in)
    assert swaps_out == swaps_in > 0
    assert engine.scheduler.host_used == 0
    # no recompute: r1's prompt is prefilled exactly once
    assert sum(1 for b in ex.batches for c in b.chunks if c.request_id == 1 and c.start_pos == 0) == 1


def test_swap_falls_back_to_recompute_when_the_host_pool_is_full():
    engine, ex = make_engine("paged", 16, preemption="swap", swap_slots=2, knobs={"block_size": 4})
    out = engine.run(make_requests([(6, 8, 0.0), (6, 8, 0.5)]))
    assert out.summary["num_finished"] == 2
    assert not any(b.swap_out for b in ex.batches)


@pytest.mark.parametrize("name,knobs", ALLOCATORS)
def test_every_allocator_finishes_every_request_under_pressure(name, knobs):
    specs = [(3 + (7 * i) % 13, 2 + (5 * i) % 11, 0.3 * i) for i in range(24)]
    engine, ex = make_engine(name, 96, knobs=knobs, max_num_batched_tokens=32)
    out = engine.run(make_requests(specs))
    assert out.summary["num_finished"] == 24 and out.summary["num_rejected"] == 0
    assert sorted(out.outputs) == list(range(24))
    for i, (_, output_len, _) in enumerate(specs):
        assert len(out.outputs[i][0]) == output_len  # recompute never changes what is generated
    fractions = out.steps[["mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac",
                           "mem_cached_frac"]].fillna(0.0)
    assert (fractions.sum(axis=1) - 1).abs().max() < 1e-9
    assert out.steps["mem_cached_frac"].isna().all() == (name not in ("paged_prefix", "radix"))


@pytest.mark.parametrize("name,knobs", ALLOCATORS)
@pytest.mark.parametrize("n,beam", [(3, 1), (1, 3)])
def test_parallel_sampling_and_beam_search_with_every_allocator(name, knobs, n, beam):
    specs = [(5, 6, 0.0, n, beam), (9, 4, 1.0, n, beam), (4, 7, 2.0, n, beam)]
    engine, ex = make_engine(name, 256, knobs=knobs)
    out = engine.run(make_requests(specs))
    assert out.summary["num_finished"] == 3
    for i, spec in enumerate(specs):
        samples = out.outputs[i]
        assert len(samples) == (n if beam == 1 else len(samples)) and len(samples) >= 1
        assert all(len(s) == spec[1] for s in samples)


def test_request_longer_than_the_model_is_rejected_and_the_run_goes_on():
    engine, _ = make_engine("paged", 64, knobs={"block_size": 4}, max_model_len=16)
    out = engine.run(make_requests([(10, 10), (4, 4)]))
    assert out.summary["num_rejected"] == 1 and out.summary["num_finished"] == 1
    assert "max_model_len" in out.requests.set_index("request_id").loc[0, "reason"]


@pytest.mark.parametrize("name", ["contiguous", "buddy"])
def test_reserve_max_holds_floor_s_over_l_sequences(name):
    # S = 64 slots, L = 16: exactly 4 sequences at once
    engine, ex = make_engine(name, 64, max_model_len=16, knobs={"reserve": "max"})
    out = engine.run(make_requests([(2, 4)] * 10))
    assert out.summary["max_batch_size"] == 4
    assert out.summary["num_finished"] == 10


def test_prefix_sharing_is_counted():
    reqs = make_requests([(12, 3, 0.0), (12, 3, 5.0)])
    reqs[1].prompt_ids = list(reqs[0].prompt_ids)
    engine, ex = make_engine("paged_prefix", 64, knobs={"block_size": 4})
    out = engine.run(reqs)
    assert out.summary["prefix_hit_rate"] > 0
    second = [c for b in ex.batches for c in b.chunks if c.request_id == 1]
    assert second[0].start_pos == 8  # two full blocks of the prompt were cached


def test_request_larger_than_the_pool_is_rejected_up_front():
    engine, _ = make_engine("paged", 16, knobs={"block_size": 4}, max_model_len=64)
    out = engine.run(make_requests([(10, 10), (4, 4)]))
    assert out.summary["num_rejected"] == 1 and out.summary["num_finished"] == 1
    assert "pool has 16" in out.requests.set_index("request_id").loc[0, "reason"]


def test_groups_of_several_samples_are_swapped_not_recomputed():
    engine, ex = make_engine("paged", 64, max_num_batched_tokens=64, swap_slots=256, knobs={"block_size": 4})
    out = engine.run(make_requests([(6, 10, 0.0, 3), (6, 10, 0.5, 3)]))
    assert out.summary["num_preemptions"] >= 1 and out.summary["num_finished"] == 2
    assert any(b.swap_out for b in ex.batches)
    assert all(len(s) == 10 for i in (0, 1) for s in out.outputs[i])


def run_mixed(name, knobs, preemption, seed, num_requests=14, num_slots=256, budget=24):
    """Random prompts, samples and beams on a small pool: the token-pool executor checks that
    every sequence reads back exactly its own tokens at every step."""
    import random

    rng = random.Random(f"{name}{knobs}{preemption}{seed}")
    specs = []
    for i in range(num_requests):
        kind = rng.choice(["single", "single", "n", "beam"])
        specs.append((rng.randint(2, 20), rng.randint(1, 12), 0.4 * i,
                      rng.randint(2, 3) if kind == "n" else 1, rng.randint(2, 3) if kind == "beam" else 1))
    engine, ex = make_engine(name, num_slots, knobs=knobs, max_num_batched_tokens=budget,
                             preemption=preemption, swap_slots=128)
    out = engine.run(make_requests(specs, seed=seed))
    assert out.summary["num_finished"] + out.summary["num_rejected"] == len(specs)
    for rid, samples in out.outputs.items():
        assert all(len(s) == specs[rid][1] for s in samples)
    return out


@pytest.mark.parametrize("name,knobs", ALLOCATORS)
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_mixed_groups_under_pressure_keep_every_token_right(name, knobs, preemption):
    out = run_mixed(name, knobs, preemption, seed=0)
    assert out.summary["num_finished"] >= 12


@pytest.mark.slow
@pytest.mark.parametrize("name,knobs", ALLOCATORS)
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("seed", range(1, 26))
def test_mixed_groups_fuzz(name, knobs, preemption, seed):
    run_mixed(name, knobs, preemption, seed, num_requests=24, num_slots=128 + 8 * seed, budget=8 + seed)


@pytest.mark.parametrize("name,knobs", [("paged", {"block_size": 4}), ("paged_prefix", {"block_size": 4})])
@pytest.mark.parametrize("preemption,swap_slots", [("recompute", 0), ("recompute", 256), ("swap", 256)])
@pytest.mark.parametrize("n,beam", [(4, 1), (1, 4)])
def test_a_preempted_group_comes_back_with_its_sharing(name, knobs, preemption, swap_slots, n, beam):
    # 10 blocks: one group needs 4 prompt blocks + 4 private ones shared, 20 unshared; two need 16
    engine, ex = make_engine(name, 40, knobs=knobs, preemption=preemption, swap_slots=swap_slots)
    out = engine.run(make_requests([(16, 4, 0.0, n, beam), (16, 4, 0.0, n, beam)]))
    assert out.summary["num_preemptions"] >= 1
    assert out.summary["num_finished"] == 2 and out.summary["num_rejected"] == 0
    assert all(len(s) == 4 for i in (0, 1) for s in out.outputs[i])
    assert out.swap_out_slots > 0 or preemption == "recompute"
    if out.swap_out_slots:  # a swapped group's shared prompt comes back once
        swapped_in = sum(len(op.slots) for b in ex.batches for op in b.swap_in)
        assert 0 < swapped_in <= out.swap_out_slots


def test_beams_wider_than_a_batch_are_rejected_with_a_reason():
    engine, _ = make_engine("paged", 256, max_num_seqs=2, knobs={"block_size": 4})
    out = engine.run(make_requests([(5, 3, 0.0, 1, 4), (5, 3, 0.0, 1, 2)]))
    req = out.requests.set_index("request_id")
    assert req.loc[0, "status"] == "rejected" and "beam_width 4 exceeds max_num_seqs 2" in req.loc[0, "reason"]
    assert req.loc[1, "status"] == "finished"


def test_a_group_too_large_even_alone_is_rejected_not_retried_forever():
    # 8 samples of 9 tokens after a 4-token prompt: 1 + 8 * 3 blocks of 4 > 16 blocks
    engine, _ = make_engine("paged", 64, knobs={"block_size": 4})
    out = engine.run(make_requests([(4, 10, 0.0, 8), (4, 3, 1.0)]))
    req = out.requests.set_index("request_id")
    assert req.loc[0, "status"] == "rejected" and "even alone" in req.loc[0, "reason"]
    assert req.loc[1, "status"] == "finished"
