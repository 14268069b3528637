"""Memory per layer group of a mixed model: bytes held in each group's blocks and bytes its layers
still read (``MemoryUsage.groups``), by hand on small pools, and the summary columns of a run."""
from __future__ import annotations

import pytest

from allocators import GROUPED, build
from kvbench.engine.recorder import GROUP_MEM_KEYS

# full attention 10 bytes a token, a window of 8 at 52 bytes, one state of 100 bytes a request
GROUPS = [("full", None, 10, 0), ("window", 8, 52, 0), ("state", None, 0, 100)]
POOL = 1000 * 62  # 1000 slots of the attention groups' 62 bytes


def _by_kind(usage):
    return {kind: (held * POOL, needed * POOL) for kind, held, needed in usage.groups}


def _run_one(name):
    knobs = dict(max_model_len=64) if name == "hybrid_static" else {}
    a = build(name, 1000, block_size=4, groups=GROUPS, prefill_chunk=4, debug=True, **knobs)
    assert a.admit(1, list(range(10)), 40).ok
    a.grow(1, 10)
    a.grow(1, 3)
    a.grow(1, 1)  # 14 tokens; this grow (first = 13, oldest read 6) drops the window's block of tokens 0..3
    return a, a.usage({1: 20})


def test_needed_bytes_by_hand_are_the_same_for_every_strategy():
    for name in GROUPED:
        _, usage = _run_one(name)
        groups = _by_kind(usage)
        # 14 computed tokens: full reads all 14, the window its last 8, the state group one state
        assert groups["full"][1] == pytest.approx(14 * 10), name
        assert groups["window"][1] == pytest.approx(8 * 52), name
        assert groups["state"][1] == pytest.approx(100), name


def test_held_bytes_by_hand():
    _, lcm = _run_one("lcm")
    held = {k: v[0] for k, v in _by_kind(lcm).items()}
    # lcm: exact blocks: full 4 blocks of 40 bytes, window 3 live blocks of 208, state one of 100
    assert held == pytest.approx({"full": 160, "window": 624, "state": 100})
    _, uniform = _run_one("uniform")
    held = {k: v[0] for k, v in _by_kind(uniform).items()}
    # uniform: 4 blocks of 4 tokens * 62 bytes, split 10 : 52 between the groups; the window keeps all 16
    # and its state block takes a whole page of 4 * 62 = 248 bytes for 100 bytes of state
    assert held == pytest.approx({"full": 160, "window": 832, "state": 248})


@pytest.mark.parametrize("name", GROUPED)
def test_held_over_groups_is_the_allocated_part_of_the_breakdown(name):
    a, usage = _run_one(name)
    held = sum(h for _, h, _ in usage.groups)
    allocated = (usage.token + usage.reserved + usage.internal) / usage.total
    assert held == pytest.approx(allocated)
    assert all(n <= h + 1e-12 for _, h, n in usage.groups)  # nothing read that is not held


def test_a_uniform_model_reports_no_groups():
    a = build("lcm", 100, block_size=4, groups=[("full", None, 10, 0)], debug=True)
    assert a.admit(1, list(range(5)), 20).ok
    assert a.usage({1: 6}).groups is None


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["backend=sim", "logger=none", "progress=false", *overrides])


def test_summary_columns_of_a_mixed_and_a_uniform_run(tmp_path):
    from kvbench.run.lifecycle import run

    common = ["workload=synthetic", "workload.num_requests=20", f"results_dir={tmp_path}"]
    mixed = run(_compose("allocator=uniform", "model=gemma-2-2b", "model.sliding_window=64",
                         "engine.kv_cache_bytes=2e8", *common))
    assert mixed["mem_chunked_frac"] is None and mixed["mem_state_frac"] is None  # no such group
    assert 0 < mixed["mem_window_needed_frac"] < mixed["mem_window_frac"]  # uniform keeps out-of-window tokens
    assert mixed["mem_needed_frac"] == pytest.approx(mixed["mem_full_needed_frac"] + mixed["mem_window_needed_frac"])
    uniform = run(_compose("allocator=paged", "model=opt-125m", "engine.kv_cache_bytes=7.55e7", *common))
    assert all(uniform[key] is None for key in GROUP_MEM_KEYS)
