"""Scheduling styles (kvbench.engine.policies): exact batches on tiny pools."""
from __future__ import annotations

import pytest

from allocators import build
from kvbench.engine import Engine, SchedulerConfig
from kvbench.engine.policies import PromptFirstScheduler, StaticBatchScheduler, scheduler_class
from kvbench.engine.scheduler import Scheduler
from tests.engine_helpers import TokenPoolExecutor, make_requests, seq_lookup


def run(cls, specs, num_slots=256, allocator="paged", **cfg):
    knobs = {"block_size": 4} if allocator == "paged" else {"block_size": 4, "reserve": "max", "max_model_len": 64}
    alloc = build(allocator, num_slots, debug=True, **knobs)
    executor = TokenPoolExecutor(num_slots)
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=64, chunked_prefill=False, **cfg),
                    max_steps=1000, scheduler_cls=cls)
    executor.lookup = seq_lookup(engine)
    out = engine.run(make_requests(specs))
    return out, [[(c.request_id, c.start_pos, c.query_len) for c in b.chunks] for b in executor.batches]


SPECS = [(5, 3, 0.0), (4, 2, 1.0)]  # the second arrives after the first step (steps last 1 s)


def test_mixed_puts_a_new_prompt_into_a_decode_step():
    _, got = run(Scheduler, SPECS)
    assert got == [[(0, 0, 5)], [(0, 5, 1), (1, 0, 4)], [(0, 6, 1), (1, 4, 1)]]


def test_prompt_first_runs_prompts_alone_then_decodes():
    out, got = run(PromptFirstScheduler, SPECS)
    assert got == [[(0, 0, 5)], [(1, 0, 4)], [(0, 5, 1), (1, 4, 1)], [(0, 6, 1)]]
    assert out.summary["num_finished"] == 2


def test_static_batching_waits_for_the_whole_batch():
    specs = [(5, 3, 0.0), (4, 1, 0.0), (4, 2, 0.5)]
    _, got = run(StaticBatchScheduler, specs, allocator="contiguous")
    # request 2 arrives while the first batch runs and joins only once both have finished
    assert got == [[(0, 0, 5), (1, 0, 4)], [(0, 5, 1)], [(0, 6, 1)], [(2, 0, 4)], [(2, 4, 1)]]


def test_scheduler_class_by_config():
    assert scheduler_class("mixed") is Scheduler
    assert scheduler_class("prompt_first") is PromptFirstScheduler
    assert scheduler_class("prompt_first", "static") is StaticBatchScheduler
    with pytest.raises(ValueError, match="system.scheduling must be one of"):
        scheduler_class("chunky")
    with pytest.raises(ValueError, match="engine.batching must be one of"):
        scheduler_class("mixed", "dynamic")


def test_prompt_first_admits_no_more_than_max_num_seqs_running():
    specs = [(5, 3, 0.0), (4, 2, 1.0), (4, 2, 1.0)]
    out, got = run(PromptFirstScheduler, specs, max_num_seqs=2)
    # at t=1 one sequence runs, so only one of the two waiting prompts is admitted; the third
    # waits until a running sequence has finished (vLLM 0.1 counted running + new against the cap)
    assert got[1] == [(1, 0, 4)]
    admitted_at = next(i for i, batch in enumerate(got) if (2, 0, 4) in batch)
    assert all(len(batch) <= 2 for batch in got)
    assert admitted_at > 2 and out.summary["num_finished"] == 3


def test_running_requests_count_prompt_only_steps_by_time():
    # steps (1 s each): [0 prompt] [1 prompt] [0,1 decode] [0 decode]: batches of 1, 1, 2, 1
    # requests; running during them 1, 2, 2, 1 (request 0 holds its KV through step 1)
    out, _ = run(PromptFirstScheduler, SPECS)
    assert out.summary["mean_batch_size"] == pytest.approx(5 / 4)
    assert out.summary["mean_running_requests"] == pytest.approx(6 / 4)
    assert list(out.steps["running_requests"]) == [1, 2, 2, 1]


@pytest.mark.parametrize("allocator,knobs", [("contiguous", {"reserve": "max"}), ("buddy", {"reserve": "max"}),
                                             ("contiguous", {"reserve": "oracle"}), ("buddy", {"reserve": "pow2"})])
def test_contiguous_samples_hold_their_regions_from_admission(allocator, knobs):
    """n samples without shared blocks: the group gets all its regions at admission or waits, so
    n=3 preempts no more than n=1 at the same load (a fork that finds no region used to preempt)."""
    def preemptions(n):
        alloc = build(allocator, 256, debug=True, block_size=4, max_model_len=64, **knobs)
        engine = Engine(alloc, TokenPoolExecutor(256), SchedulerConfig(max_model_len=64, chunked_prefill=False),
                        max_steps=5000, scheduler_cls=PromptFirstScheduler)
        specs = [(6 + i % 5, 10 + i % 7, 0.5 * i, n) for i in range(24)]
        out = engine.run(make_requests(specs))
        assert out.summary["num_finished"] == 24
        return out.summary["num_preemptions"]
    assert preemptions(3) <= preemptions(1)


def test_a_contiguous_group_that_cannot_hold_every_sample_waits():
    # 64-slot regions (reserve max), a 192-slot pool: one n=3 group fills it; the second waits
    # whole until the first has finished instead of being admitted and preempted at its forks
    alloc = build("contiguous", 192, debug=True, block_size=4, reserve="max", max_model_len=64)
    executor = TokenPoolExecutor(192)
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=64, chunked_prefill=False), max_steps=1000,
                    scheduler_cls=PromptFirstScheduler)
    out = engine.run(make_requests([(5, 3, 0.0, 3), (4, 2, 0.0, 3)]))
    assert out.summary["num_preemptions"] == 0 and out.summary["num_finished"] == 2
    first_of_second = next(i for i, b in enumerate(executor.batches) if any(c.request_id == 1 for c in b.chunks))
    last_of_first = max(i for i, b in enumerate(executor.batches) if any(c.request_id == 0 for c in b.chunks))
    assert first_of_second > last_of_first


def test_static_batch_steps_carry_the_padded_rows():
    from kvbench.engine.policies import PaddedRows, StaticUnpaddedScheduler

    specs = [(5, 3, 0.0), (4, 1, 0.0), (4, 2, 0.5)]
    alloc = build("contiguous", 256, debug=True, block_size=4, reserve="max", max_model_len=64)
    executor = TokenPoolExecutor(256)
    Engine(alloc, executor, SchedulerConfig(max_model_len=64, chunked_prefill=False), max_steps=100,
           scheduler_cls=StaticBatchScheduler).run(make_requests(specs))
    # batch 1: two rows padded to 5 prompt tokens, then decoded at positions 5 and 6 (request 1,
    # done after its first token, still costs its row); batch 2: one row
    assert [b.padding for b in executor.batches] == [PaddedRows(2, 5, 0), PaddedRows(2, 1, 5), PaddedRows(2, 1, 6),
                                                      PaddedRows(1, 4, 0), PaddedRows(1, 1, 4)]
    _, got = run(StaticUnpaddedScheduler, specs, allocator="contiguous")
    assert got == [[(0, 0, 5), (1, 0, 4)], [(0, 5, 1)], [(0, 6, 1)], [(2, 0, 4)], [(2, 4, 1)]]


def test_padding_costs_what_the_padded_tensor_batch_computes():
    from kvbench.engine.policies import PaddedRows
    from kvbench.sim.cost_model import StepSummary
    from kvbench.sim.padding import padded_summary

    live = StepSummary(block_size=16, num_tokens=1, num_seqs=1, num_sampled=1, num_draws=1, decode_pairs=21,
                       decode_blocks=2)
    padded = padded_summary(live, PaddedRows(rows=4, query_len=1, start_pos=40))
    assert (padded.num_tokens, padded.num_seqs, padded.decode_pairs, padded.decode_blocks) == (4, 4, 164, 12)
    prompt = padded_summary(StepSummary(block_size=16, num_tokens=9), PaddedRows(rows=3, query_len=5, start_pos=0))
    assert (prompt.num_tokens, prompt.prefill_pairs, prompt.prefill_blocks) == (15, 45, 3)
