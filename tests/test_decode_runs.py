"""Decode runs (kvbench/engine/decode_run.py) give the general path's results bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from allocators.run_sums import RunSums
from kvbench.config.errors import CONF_DIR
from kvbench.engine import Engine, SchedulerConfig
from kvbench.run.lifecycle import make_engine
from kvbench.run.prepare import prepare

SETTINGS = {
    # light load: runs end at arrivals and finishes
    "rate": ["allocator=paged", "workload=sharegpt", "workload.request_rate=2.0", "workload.duration_s=40"],
    # everything at t=0 in a small pool: a waiting head that does not fit, preemptions, short runs
    "pressure": ["allocator=paged", "workload=sharegpt", "workload.num_requests=120", "engine.kv_cache_bytes=1.6384e9"],
    # a pool of 500 slots: prompts rejected as too long, a preemption in most short steps
    "tiny-pool": ["allocator=paged", "workload=sharegpt", "workload.num_requests=60", "engine.kv_cache_bytes=4.096e8"],
    # block size 32 and a batch-size cap that leaves groups waiting with room in the pool
    "capped": ["allocator=paged", "workload=sharegpt", "workload.num_requests=80", "allocator.block_size=32", "engine.max_num_seqs=12"],
    # conversations: a finished turn releases the next one (a run may end with that finish)
    "multiturn": ["allocator=paged", "workload=multiturn", "workload.num_requests=40", "workload.think_time_s=0.5"],
    # paper-era vLLM (prompt-only steps first), the paper's rate studies' system
    "prompt-first": ["allocator=paged", "system=vllm-2023", "workload=sharegpt", "workload.request_rate=3.0",
                     "workload.duration_s=40", "engine.kv_cache_bytes=3.2768e9"],
    "prompt-first-orca": ["allocator=orca-pow2", "system=vllm-2023", "workload=alpaca_synthetic",
                          "workload.request_rate=20.0", "workload.duration_s=10"],
    # the region allocators: a buddy reserving the maximum (Orca (Max)), a contiguous oracle
    "orca-max": ["allocator=orca-max", "workload=sharegpt", "workload.request_rate=2.0", "workload.duration_s=40"],
    # prefix caching: hashes registered round by round between the grows that evict cached blocks
    "prefix-pressure": ["allocator=paged_prefix", "workload=sharegpt", "workload.num_requests=120",
                        "engine.kv_cache_bytes=1.6384e9"],
    "prefix-multiturn-arc": ["allocator=paged_prefix", "allocator.eviction=arc", "workload=multiturn",
                             "workload.num_requests=60", "workload.think_time_s=0.5", "engine.kv_cache_bytes=1.6384e9"],
    "prefix-prompt-first": ["allocator=paged_prefix", "system=vllm-2023", "workload=multiturn", "workload.num_requests=40",
                            "workload.think_time_s=2.0", "engine.kv_cache_bytes=2.4576e9"],
    # shared system prompts: running sequences share full prefix blocks
    "prefix-sysprompt": ["allocator=paged_prefix", "workload=system_prompts", "workload.num_requests=150",
                         "engine.kv_cache_bytes=1.6384e9"],
    # swap preemption: runs, but the step short of blocks goes to the general path
    "prefix-swap": ["allocator=paged_prefix", "engine.preemption=swap", "workload=sharegpt", "workload.num_requests=100",
                    "engine.kv_cache_bytes=1.6e9"],
    # radix: leaves evicted tail first by the grows of a run, tree blocks shared
    "radix-multiturn": ["allocator=radix", "workload=multiturn", "workload.num_requests=60", "workload.think_time_s=0.5",
                        "engine.kv_cache_bytes=1.6384e9"],
    "radix-sysprompt": ["allocator=radix", "workload=system_prompts", "workload.num_requests=150",
                        "engine.kv_cache_bytes=1.6384e9"],
    "contiguous-oracle": ["allocator=contiguous", "allocator.reserve=oracle", "workload=sharegpt",
                          "workload.num_requests=120", "engine.kv_cache_bytes=1.6384e9"],
    # about 190 running under heavy pressure (the paper's batch study): the state held over steps
    # that preempt, finish and admit, short steps that finish, prompt steps' books from the sums
    "crowded-prompt-first": ["allocator=paged", "system=vllm-2023", "workload=alpaca", "workload.request_rate=30",
                             "workload.duration_s=60", "engine.kv_cache_bytes=1.2884901888e10"],
    "crowded-mixed": ["allocator=paged_prefix", "workload=alpaca", "workload.request_rate=40",
                      "workload.duration_s=10", "engine.kv_cache_bytes=1.2884901888e10"],
}


def engine_for(overrides: list[str], runs: bool, progress=None):
    """The engine a run of these overrides builds (its scheduler, policies and limits), and its requests."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["backend=sim", "model=opt-13b",
                                                       "gpu=a100-40gb", "progress=false", "logger=none", *overrides])
    prep = prepare(cfg)
    engine = make_engine(cfg, prep, progress)
    if not runs:
        engine.decode_runs = None
    return engine, prep.workload.requests


def without_wall_time(steps: pd.DataFrame) -> pd.DataFrame:
    return steps.drop(columns=["schedule_s"])


# knobs none of the settings above turn, with prefix caching (the slow tier)
MORE_SETTINGS = {
    "block-8": ["allocator.block_size=8", "workload=sharegpt", "workload.num_requests=100", "engine.kv_cache_bytes=1.2e9"],
    "block-64-rate": ["allocator.block_size=64", "workload=sharegpt", "workload.request_rate=4.0", "workload.duration_s=30"],
    "slru-multiturn": ["allocator.eviction=slru", "workload=multiturn", "workload.num_requests=60",
                       "workload.think_time_s=1.0", "engine.kv_cache_bytes=1.2e9"],
    "lfu-sysprompt-rate": ["allocator.eviction=lfu", "workload=system_prompts", "workload.request_rate=8.0",
                           "workload.duration_s=15", "engine.kv_cache_bytes=2.0e9"],
    "shared-prefix-prompt-first": ["system=vllm-2023", "workload=shared_prefix", "workload.prefix_len=200",
                                   "workload.request_rate=6.0", "workload.duration_s=20"],
    "any-order": ["engine.keep_arrival_order=false", "workload=sharegpt", "workload.num_requests=100",
                  "engine.kv_cache_bytes=1.6e9"],
    "tp4": ["model=opt-66b", "gpu.count=4", "workload=sharegpt", "workload.request_rate=3.0", "workload.duration_s=30"],
    "token-budget-64": ["engine.max_num_batched_tokens=64", "workload=sharegpt", "workload.num_requests=60"],
}


def assert_runs_match(overrides: list[str]) -> None:
    fast, requests = engine_for(overrides, runs=True)
    slow, same_requests = engine_for(overrides, runs=False)
    out_fast, out_slow = fast.run(requests), slow.run(same_requests)
    assert fast.decode_runs.steps_fast > len(out_fast.steps) // 4  # runs took a real share of the steps
    pd.testing.assert_frame_equal(without_wall_time(out_fast.steps), without_wall_time(out_slow.steps), check_exact=True)
    times = "token_times_s"  # per sample arrays: compared one by one
    pd.testing.assert_frame_equal(out_fast.requests.drop(columns=[times]), out_slow.requests.drop(columns=[times]),
                                  check_exact=True)
    for mine, theirs in zip(out_fast.requests[times], out_slow.requests[times], strict=True):
        assert len(mine) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(mine, theirs))
    assert out_fast.outputs == out_slow.outputs
    volatile = {"schedule_s_per_token", "wall_s"}
    assert {k: v for k, v in out_fast.summary.items() if k not in volatile} == \
        {k: v for k, v in out_slow.summary.items() if k not in volatile}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_runs_match_the_general_path(setting):
    assert_runs_match(SETTINGS[setting])


@pytest.mark.slow
@pytest.mark.parametrize("allocator", ["paged_prefix", "radix"])
@pytest.mark.parametrize("setting", sorted(MORE_SETTINGS))
def test_runs_match_with_prefix_caching_and_other_knobs(setting, allocator):
    assert_runs_match([f"allocator={allocator}", *MORE_SETTINGS[setting]])


@pytest.mark.slow
def test_runs_match_radix_without_running_inserts():
    assert_runs_match(["allocator=radix", "allocator.insert_running=false", *MORE_SETTINGS["lfu-sysprompt-rate"]])


def test_progress_and_max_steps_see_every_step():
    calls = {True: [], False: []}
    for runs in (True, False):
        engine, requests = engine_for([*SETTINGS["rate"], "engine.max_steps=700"], runs,
                                      progress=lambda done, now, runs=runs: calls[runs].append((done, now)))
        with pytest.raises(RuntimeError, match="max_steps=700"):
            engine.run(requests)
    assert calls[True] == calls[False] and len(calls[True]) == 700


def test_runs_only_where_every_step_is_the_same():
    engine, _ = engine_for(["allocator=vattention"], runs=True)
    assert engine.decode_runs is None  # a grow may map a page: the cost model charges it per step
    engine, _ = engine_for(["allocator=paged_prefix", "offload=host"], runs=True)
    assert engine.decode_runs is None  # tiers: a store or load may ride on any step
    engine, _ = engine_for(["allocator=paged"], runs=True)
    assert engine.decode_runs is not None
    stops = Engine(engine.allocator, engine.executor, SchedulerConfig(stop_token_ids=(2,)))
    assert stops.decode_runs is None  # a sampled stop token ends a sequence at any step
    assert Engine(engine.allocator, engine.executor, SchedulerConfig(), memmap_every=4).decode_runs is None


@pytest.mark.parametrize("overrides", [
    ["model=opt-13b", "gpu=a100-40gb", "system=vllm-2023"],
    ["model=opt-175b", "gpu=a100-80gb", "gpu.count=8", "system=modern"],  # tensor parallel: all-reduces
    # tiny steps under an eager host's issue floor: it decides some steps' time, not others'
    ["model=tiny-llama", "gpu=h100-80gb", "system=modern", "system.eager_layer_issue_s=5e-5"],
])
def test_run_times_are_step_time_step_by_step(overrides):
    from kvbench.sim.cost_model import StepSummary, step_time

    engine, _ = engine_for(["allocator=paged", *overrides], runs=True)
    params, rng = engine.executor.params, np.random.default_rng(0)
    floors_seen = set()
    for n, bs in ((1, 16), (7, 16), (64, 32), (256, 8)):
        pairs = np.sort(rng.integers(n, 2048 * n, size=40))
        blocks = (-(-pairs // bs) + rng.integers(0, n, size=40)).tolist()
        pairs = pairs.tolist()
        run = engine.executor.decode_run_times(n, pairs, blocks, bs)
        floors_seen.update(o > params.overhead_s + n * params.seq_overhead_s for o in run["overhead_s"])
        for j in range(len(pairs)):
            one = step_time(params, StepSummary(bs, n, n, n, n, 0, 0, pairs[j], blocks[j]))
            assert {key: run[key][j] for key in run} == {key: one[key] for key in run}
    assert floors_seen == ({True, False} if params.issue_floor_s else {False})


def _books_per_sequence(bs: int, num_slots: int, tokens: np.ndarray, finals: np.ndarray, steps: int) -> tuple:
    """Reference for ``PagedAllocator.decode_run_books`` with no sharing and no cache: each
    sequence's last block, round by round (sequences x rounds), summed."""
    held = tokens[:, None] + np.arange(1, steps + 1)
    fill = held % bs  # 0: the last block is full
    partial = fill != 0
    reach = np.minimum(finals[:, None] - held + fill, bs)  # the slots its final length fills in that block
    per_table = (-(-held // bs)).sum(axis=0)
    return (held.sum(axis=0).tolist(), ((reach - fill) * partial).sum(axis=0).tolist(),
            ((bs - reach) * partial).sum(axis=0).tolist(), (num_slots - per_table * bs).tolist(),
            [(u, u) for u in per_table.tolist()], None)


@pytest.mark.parametrize("bs", [1, 4, 16, 64])
def test_paged_run_books_are_the_per_sequence_sums(bs):
    from allocators.paged import PagedAllocator

    rng = np.random.default_rng(bs)
    for _ in range(100):
        n, steps = int(rng.integers(1, 40)), int(rng.integers(1, 3 * bs + 3))
        tokens = rng.integers(1, 4 * bs, size=n)
        finals = tokens + steps + rng.integers(0, 3 * bs, size=n)  # a run never passes a final length
        finals[: n // 3] = tokens[: n // 3] + steps  # some end in the run's last round
        alloc = PagedAllocator(1 << 16, block_size=bs)
        for seq_id, held in enumerate(tokens.tolist()):  # each holds its tokens, as a run finds them
            assert alloc.admit(seq_id, [7] * held, 1 << 14).ok
            alloc.grow(seq_id, held)
        run = RunSums(list(range(n)), tokens, finals, bs)
        assert alloc.decode_run_books(run, steps) == _books_per_sequence(bs, alloc.num_slots, tokens, finals, steps)


@pytest.mark.parametrize("bs", [1, 4, 16])
def test_paged_run_usage_is_usage(bs):
    """A run's sequences (private partial blocks) and others admitted beside them (some with
    prefix blocks shared, some mid-prompt with blocks beyond their tokens): ``run_usage`` from the
    run's sums is ``usage``."""
    from allocators.paged_prefix import PagedPrefixAllocator

    rng = np.random.default_rng(bs + 7)
    answered = 0
    for _ in range(120):
        alloc = PagedPrefixAllocator(1 << 15, block_size=bs)
        n, m = int(rng.integers(0, 12)), int(rng.integers(0, 5))
        prefix = [int(t) for t in rng.integers(0, 50, size=int(rng.integers(0, 3 * bs)))]
        finals = {}
        for seq_id in range(n + m):  # each a shared prefix (some) and its own tokens
            prompt = (prefix if rng.random() < 0.5 else []) + [1000 * seq_id + k for k in range(int(rng.integers(1, 4 * bs)))]
            assert alloc.admit(seq_id, prompt, 1 << 13).ok
            hold = len(prompt) if seq_id < n or rng.random() < 0.7 else int(rng.integers(0, len(prompt)))
            if hold > alloc.num_tokens(seq_id):
                alloc.grow(seq_id, hold - alloc.num_tokens(seq_id), prompt[alloc.num_tokens(seq_id):hold])
            finals[seq_id] = len(prompt) + int(rng.integers(0, 3 * bs))
        alloc.commit()
        run_ids = list(range(n))
        tokens = np.array([alloc.num_tokens(i) for i in run_ids], dtype=np.int64)
        run = RunSums(run_ids, tokens, np.array([finals[i] for i in run_ids], dtype=np.int64), bs)
        if not alloc._partials_private():
            continue
        assert alloc.run_usage(run, {i: finals[i] for i in range(n, n + m)}) == alloc.usage(finals)
        answered += 1
    assert answered > 60


@pytest.mark.parametrize("bs", [1, 2, 16])
def test_run_sums_kept_through_rounds_and_drops_are_recomputed_sums(bs):
    """RunSums moved by rounds, by dropping sequences (finished ones, whose tokens reached their
    final block, and preempted ones, anywhere) and by inserting admitted ones equal sums gathered
    afresh from the same sequences: context, blocks, each later round's takes and final-block
    waste, and now's sequences at a block start and reached final-block waste."""
    rng = np.random.default_rng(100 + bs)
    for _ in range(60):
        n = int(rng.integers(1, 30))
        tokens = rng.integers(1, 5 * bs + 2, size=n)
        finals = tokens + rng.integers(0, 6 * bs + 3, size=n)
        kept = RunSums(list(range(n)), tokens, finals, bs)
        for _ in range(int(rng.integers(1, 6))):
            room = int((kept.finals - kept.tokens).min()) if len(kept) else 0
            kept.advance(int(rng.integers(0, room + 1)))
            if rng.random() < 0.3:  # admitted by a prompt-only step, at their running places
                m = int(rng.integers(1, 4))
                at = sorted(rng.choice(len(kept) + m, size=m, replace=False).tolist())
                held = rng.integers(1, 5 * bs + 2, size=m)
                kept.insert(at, [1000 + len(kept) + k for k in range(m)], held.tolist(),
                            (held + rng.integers(0, 6 * bs + 3, size=m)).tolist())
            elif len(kept):
                if rng.random() < 0.5:  # preempted: the newest ones, wherever their tokens are
                    kept.keep_first(int(rng.integers(0, len(kept) + 1)))
                else:  # finished: those at their final length, and any others at random
                    done = (kept.tokens == kept.finals) | (rng.random(len(kept)) < 0.2)
                    kept.keep((~done).tolist())
            fresh = RunSums(kept.seq_ids, kept.tokens, kept.finals, bs)
            steps = int(rng.integers(1, 3 * bs + 3))
            assert (kept.context, kept.blocks, kept.takes(steps)) == (fresh.context, fresh.blocks, fresh.takes(steps))
            assert kept.internal(steps) == fresh.internal(steps)
            assert (kept.at_block_start(), kept.reached_waste()) == (fresh.at_block_start(), fresh.reached_waste())


def test_draw_tokens_at_once_are_the_loops_draws():
    import random

    from kvbench.executors.sim import DRAWS_AT_ONCE

    engine, _ = engine_for(["allocator=paged"], runs=True)
    executor = engine.executor
    executor._rng = random.Random(7)
    twin = random.Random(7)
    for count in (0, 1, DRAWS_AT_ONCE - 1, DRAWS_AT_ONCE, DRAWS_AT_ONCE + 1, 1000, 3):
        assert executor.draw_tokens(count) == [int(twin.random() * executor.vocab_size) for _ in range(count)]
    assert executor._rng.random() == twin.random()  # the generator is where the loop leaves it


RUN_VALUE_CASES = {  # each: the runs' values (run by run) and the general steps' values
    "ints": ([[1, 2], [3]], [4]),
    "floats": ([[0.5, 1.5], [2.5]], [3.5]),
    "ints then floats": ([[1, 2], [2.5, 3]], []),
    "floats then ints": ([[2.5], [1, 2]], [7]),
    "int runs, float general": ([[1, 2]], [0.5]),
    "nan among ints": ([[1, math.nan], [3]], [4]),
    "none after ints": ([[1, 2], [None, 4]], [5]),
    "none after floats": ([[1.5], [None]], []),
    "text": ([["a"], [1]], [2]),
    "general only": ([], [1, 2.5]),
    "huge int": ([[1], [2 ** 70]], []),
    "past int64, within uint64": ([[1], [2 ** 63]], []),
    "huge int in general": ([[1, 2]], [2 ** 70]),
}


@pytest.mark.parametrize("case", list(RUN_VALUE_CASES))
def test_step_columns_are_typed_as_pandas_infers_them(case):
    """A step column built from the runs' typed buffers and the general rows has the values and
    the type pandas gives the same values in step order (a bool would count as an int: no step
    value is one)."""
    from kvbench.engine.recorder import RunColumn, _column

    runs, general = RUN_VALUE_CASES[case]
    column = RunColumn()
    for values in runs:
        column.append(values)
    run_values = [v for values in runs for v in values]
    total = len(run_values) + len(general)
    general_at = np.arange(len(run_values), total)  # the general steps last, as one case of many
    got = pd.Series(_column(tuple(general), general_at, column, total))
    pd.testing.assert_series_equal(got, pd.Series(run_values + list(general)))


def test_longest_gaps_are_each_requests_own():
    """Requests of no, one and several samples, empty and one-token ones among them: each one's
    longest gap is the largest difference inside one of its samples, never across two."""
    from kvbench.engine.recorder import longest_gaps

    rng = np.random.default_rng(3)
    for _ in range(200):
        streams = [[np.cumsum(rng.exponential(size=int(rng.integers(0, 6)))) + 100 * rng.random()
                    for _ in range(int(rng.integers(0, 4)))] for _ in range(int(rng.integers(0, 8)))]
        want = []
        for request in streams:
            gaps = [float(np.diff(t).max()) for t in request if len(t) > 1]
            want.append(max(gaps) if gaps else math.nan)
        got = longest_gaps(streams)
        assert len(got) == len(want)
        assert all((g == w) or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want))


@pytest.mark.parametrize("reserve", ["max", "pow2", "oracle"])
def test_region_run_books_are_the_per_region_sums(reserve):
    """Regions of every fill (short of, at and past their final length's reach): the run books from
    the sorted gaps equal each region's reserved slots round by round, summed."""
    from allocators.contiguous import ContiguousAllocator

    rng = np.random.default_rng(len(reserve))
    for _ in range(60):
        alloc = ContiguousAllocator(1 << 16, block_size=16, reserve=reserve, max_model_len=2048)
        n, steps = int(rng.integers(1, 12)), int(rng.integers(1, 40))
        tokens = rng.integers(1, 300, size=n)
        finals = tokens + steps + rng.integers(0, 200, size=n)
        for seq_id, (held, final) in enumerate(zip(tokens.tolist(), finals.tolist())):
            assert alloc.admit(seq_id, [3] * held, 2048, final).ok
            alloc.grow(seq_id, held)
        caps = np.array([alloc._seqs[i].capacity for i in range(n)])
        held = tokens[:, None] + np.arange(1, steps + 1)
        fill = np.minimum(finals, caps)[:, None]
        want_reserved = np.where(fill > held, fill - held, 0).sum(axis=0).tolist()
        token, reserved, internal, external, _, _ = alloc.decode_run_books(RunSums(list(range(n)), tokens, finals, 16), steps)
        assert (token, reserved) == (held.sum(axis=0).tolist(), want_reserved)
        assert internal == [int(caps.sum()) - t - r for t, r in zip(token, reserved)]
