"""paged_window: blocks leave the pool once every layer's sliding window has passed them."""
from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from allocators import AllocatorError, build
from allocators.paged_window import DROPPED
from kvbench.engine import Engine, SchedulerConfig
from tests.engine_helpers import TokenPoolExecutor, make_requests, seq_lookup


def test_a_decode_step_drops_the_blocks_before_its_window():
    a = build("paged_window", 64, block_size=4, window=6, debug=True)
    assert a.admit(0, list(range(10)), 32).ok
    a.grow(0, 10)  # positions 0..9: position 0 reads 0 itself, nothing dropped
    assert DROPPED not in a.block_table(0)
    a.grow(0, 1)  # position 10 reads 5..10: block 0 (positions 0..3) is out
    table = a.block_table(0)
    assert table[0] == DROPPED and len(table) == 3
    assert a.stats()["window_freed_slots"] == 4
    assert a.usage({0: 11}).external == 64 - 2 * 4


def test_a_prefill_chunk_keeps_what_its_first_token_reads():
    a = build("paged_window", 64, block_size=4, window=6, debug=True)
    a.admit(0, list(range(20)), 32)
    a.grow(0, 8)
    a.grow(0, 12)  # the chunk's first token (8) reads 3..8: block 0 (0..3) holds position 3
    assert DROPPED not in a.block_table(0)
    a.grow(0, 1)  # position 20 reads 15..20: blocks 0..2 go, block 3 (12..15) stays
    assert a.block_table(0)[:4] == [DROPPED] * 3 + [a.block_table(0)[3]] and a.block_table(0)[3] != DROPPED


def test_a_block_shared_with_a_fork_stays_until_both_drop_it():
    a = build("paged_window", 64, block_size=4, window=4, debug=True)
    a.admit(0, list(range(8)), 32)
    a.grow(0, 8)
    assert a.fork(0, 1)
    a.grow(0, 1)  # position 8 reads 5..8: block 0 leaves seq 0's table, seq 1 still holds it
    assert a.block_table(0)[0] == DROPPED and a.block_table(1)[0] != DROPPED
    assert a.stats()["window_freed_slots"] == 0
    a.grow(1, 1)
    assert a.stats()["window_freed_slots"] == 4
    a.free(0)
    a.free(1)
    assert a.usage({}).external == 64


def test_window_is_required_and_positive():
    with pytest.raises(AllocatorError, match="window"):
        build("paged_window", 64, block_size=4)
    with pytest.raises(AllocatorError, match="window"):
        build("paged_window", 64, block_size=4, window=0)


def windowed_engine(name, num_slots, knobs, window, **cfg):
    allocator = build(name, num_slots, debug=True, **knobs)
    executor = TokenPoolExecutor(num_slots, context_seeded=True, window=window)
    engine = Engine(allocator, executor, SchedulerConfig(max_model_len=64, **cfg), max_steps=20000, memmap_every=3)
    executor.lookup = seq_lookup(engine)
    return engine, executor, allocator


SPECS = [(10 + (7 * i) % 20, 12 + (5 * i) % 25, 0.2 * i, 1 + i % 3, 1) for i in range(16)]


def test_every_windowed_sequence_reads_its_window_back_under_pressure_and_outputs_match_alone():
    """The token pool checks each chunk reads its own tokens within the window; preemption
    (recompute) and forks included; the outputs equal those of an unpressured run."""
    window = 10
    engine, _, alloc = windowed_engine("paged_window", 96, {"block_size": 4, "window": window}, window,
                                       max_num_batched_tokens=24)
    out = engine.run(make_requests(SPECS))
    assert out.summary["num_finished"] == len(SPECS) and out.summary["num_preemptions"] > 0
    assert alloc.stats()["window_freed_slots"] > 0 and not alloc.live_sequences()
    roomy, _, _ = windowed_engine("paged_window", 4096, {"block_size": 4, "window": window}, window,
                                  max_num_batched_tokens=24)
    assert roomy.run(make_requests(SPECS)).outputs == out.outputs
    fractions = out.steps[["mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac"]]
    assert (fractions.sum(axis=1) - 1).abs().max() < 1e-9
    token_slots = (out.memmap["category"] == 1).sum(axis=1)  # the snapshot skips dropped entries
    assert token_slots.max() <= 96


def test_the_window_runs_more_sequences_at_once_than_paged():
    window = 8
    specs = [(6, 50, 0.0) for _ in range(12)]
    runs = {}
    for name, knobs in (("paged", {"block_size": 4}), ("paged_window", {"block_size": 4, "window": window})):
        engine, _, _ = windowed_engine(name, 160, knobs, window, max_num_batched_tokens=64)
        runs[name] = engine.run(make_requests(specs))
    assert all(r.summary["num_finished"] == 12 for r in runs.values())
    assert runs["paged_window"].summary["num_preemptions"] < runs["paged"].summary["num_preemptions"]
    assert runs["paged_window"].steps["batch_size"].mean() > runs["paged"].steps["batch_size"].mean()


# -- the app: the window comes from the model, which must slide on every layer -------------------
def _cfg(*overrides):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["allocator=paged_window", "backend=sim", *overrides])


def test_the_window_defaults_to_the_models():
    from kvbench.run.prepare import _allocator, run_spec

    cfg = _cfg("model=phi-3-mini")
    alloc = _allocator(cfg, run_spec(cfg, kv_bytes=10**9))
    assert alloc.window == 2047


@pytest.mark.parametrize("overrides, message", [
    (["model=llama-7b"], "does not slide on every layer"),
    (["model=gemma-2-2b"], "does not slide on every layer"),
    (["model=phi-3-mini", "engine.preemption=swap"], "preemption=recompute"),
])
def test_refusals_are_one_clear_config_error(overrides, message):
    from kvbench.run.prepare import _allocator, run_spec
    from kvbench.config.errors import ConfigError

    cfg = _cfg(*overrides)
    with pytest.raises(ConfigError, match=message):
        _allocator(cfg, run_spec(cfg, kv_bytes=10**9))


def test_an_explicit_window_is_taken_for_any_model():
    from kvbench.run.prepare import _allocator, run_spec

    cfg = _cfg("model=llama-7b", "allocator.window=512")
    alloc = _allocator(cfg, run_spec(cfg, kv_bytes=10**9))
    assert alloc.window == 512
