"""Prefix caching across layer groups (allocators.grouped_prefix): a hit is as long as the shortest
group's, on hand-made cases; state checkpoints and their memory; a sim run with hits."""
from __future__ import annotations

import pytest

from allocators import AllocatorError, Fit, build

FULL_WINDOW = [("full", None, 10, 0), ("window", 8, 52, 0)]
FULL_STATE = [("full", None, 10, 0), ("state", None, 0, 100)]
NAMES = ("hybrid_prefix", "lcm_prefix")


def _serve(a, seq_id, prompt, step=4):
    """Admit, compute the prompt ``step`` tokens at a time with a commit after each (chunked prefill)."""
    admission = a.admit(seq_id, prompt, len(prompt) + 8)
    assert admission.ok
    done = admission.num_cached_tokens
    while done < len(prompt):
        n = min(step, len(prompt) - done)
        assert a.grow(seq_id, n, prompt[done:done + n]) is not None
        a.commit()
        done += n
    return admission.num_cached_tokens


@pytest.mark.parametrize("name", NAMES)
def test_a_hit_needs_the_window_groups_last_window(name):
    a = build(name, 1000, block_size=4, groups=FULL_WINDOW, prefill_chunk=4, debug=True)
    first = list(range(24))
    assert _serve(a, 1, first) == 0
    a.free(1)
    # cached, oldest first: the window blocks 0, 1, 2 (dropped while the prompt was computed), then
    # the freed sequence's full blocks 5..0 and window blocks 5..3
    assert [g for g, _ in list(a._cached)[:3]] == [1, 1, 1]
    assert a.cached_prefix_len(first + [100]) == 24  # full: blocks 0..5; window: blocks 4, 5 (positions 17..23)
    assert a.cached_prefix_len(first[:16] + [200, 201, 202, 203]) == 16  # window: blocks 2, 3
    for _ in range(3):
        assert a._evict_one()  # the window's blocks 0, 1, 2 leave; every full block stays
    assert a.cached_prefix_len(first[:16] + [200, 201, 202, 203]) == 0  # no window of a position 4..16 is whole
    assert a.cached_prefix_len(first + [100]) == 24
    assert _serve(a, 2, first + [100]) == 24
    tables = a.group_tables(2)
    assert tables[1][:4] == [-1, -1, -1, -1]  # the window group shares only what position 24 reads
    assert a.stats()["prefix_hits"] == 24


@pytest.mark.parametrize("name", NAMES)
def test_state_groups_hit_at_their_checkpoints_and_pay_for_them(name):
    a = build(name, 1000, block_size=4, groups=FULL_STATE, state_checkpoint_every=8, prefill_chunk=4, debug=True)
    prompt = list(range(20))
    _serve(a, 1, prompt)
    # the request's own state plus checkpoints after 8 and 16 tokens: three state blocks held
    assert len(a._ref[1]) == 3
    held = {kind: h for kind, h, _ in a.usage({1: 28}).groups}
    needed = {kind: n for kind, _, n in a.usage({1: 28}).groups}
    assert held["state"] > needed["state"] > 0  # the checkpoints' memory counts, beyond the one state read
    a.free(1)
    assert a.cached_prefix_len(prompt + [7]) == 16  # position 20 has no checkpoint: the one at 16
    assert _serve(a, 2, prompt + [7]) == 16
    none = build(name, 1000, block_size=4, groups=FULL_STATE, prefill_chunk=4, debug=True)
    _serve(none, 1, prompt)
    none.free(1)
    assert none.cached_prefix_len(prompt + [7]) == 0  # no checkpoints: a state model never hits


def test_checkpoints_must_fall_on_block_boundaries():
    with pytest.raises(AllocatorError, match="state_checkpoint_every=6 must be a multiple of block_size=4"):
        build("hybrid_prefix", 1000, block_size=4, groups=FULL_STATE, state_checkpoint_every=6)


@pytest.mark.parametrize("name", NAMES)
def test_cached_blocks_make_room_when_the_pool_runs_short(name):
    # 40 slots of 62 bytes: room for few blocks, so the second request evicts the first's cache
    a = build(name, 40, block_size=4, groups=FULL_WINDOW, prefill_chunk=4, debug=True)
    _serve(a, 1, list(range(16)))
    a.free(1)
    cached = a.stats()["cached_free_blocks"]
    assert cached > 0 and a.usage({}).cached > 0
    assert _serve(a, 2, list(range(100, 124))) == 0
    assert a.stats()["evictions"] > 0
    a.free(2)
    a.check_invariants()


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["backend=sim", "logger=none", "progress=false", *overrides])


def test_a_multiturn_sim_run_hits_across_groups(tmp_path):
    from kvbench.run.lifecycle import run

    common = ["model=gemma-2-2b", "model.sliding_window=64", "workload=multiturn", "workload.num_requests=30",
              "engine.kv_cache_bytes=2e8", f"results_dir={tmp_path}"]
    cached = run(_compose("allocator=lcm_prefix", *common))
    plain = run(_compose("allocator=lcm", *common))
    assert cached["num_finished"] == plain["num_finished"] == 30
    assert cached["prefix_hit_rate"] > 0.2 and plain["prefix_hit_rate"] is None
    assert cached["mean_ttft_s"] < plain["mean_ttft_s"]  # hit tokens are not computed again


@pytest.mark.parametrize("name, prompt_len", [("hybrid_prefix", 400), ("lcm_prefix", 204)])
def test_a_refused_admit_evicts_nothing(name, prompt_len):
    # 80 slots of 62 bytes: hybrid 124 pages of 40 bytes; lcm 4 large pages of 1040 bytes
    a = build(name, 80, block_size=4, groups=FULL_WINDOW, prefill_chunk=4, debug=True)
    _serve(a, 1, list(range(16)))
    a.free(1)
    _serve(a, 2, list(range(50, 58)))  # live: what it holds the cache cannot give back
    before = (list(a._cached), a.usage({2: 16}))
    # fits the whole pool, but not beside request 2 even with every cached block evicted
    refused = a.admit(3, list(range(1000, 1000 + prompt_len)), prompt_len + 8)
    assert refused.fit is Fit.LATER
    assert (list(a._cached), a.usage({2: 16})) == before


def test_on_a_uniform_model_the_prefix_variants_run_as_paged_prefix(tmp_path):
    from kvbench.run.lifecycle import run

    common = ["model=opt-125m", "workload=multiturn", "workload.num_requests=40", "engine.kv_cache_bytes=7.55e7",
              f"results_dir={tmp_path}"]
    paged = run(_compose("allocator=paged_prefix", *common))
    for name in NAMES:
        other = run(_compose(f"allocator={name}", *common))
        # the same steps, hits and latencies; the cache's bookkeeping differs only in which free
        # pages hold what (the paper's block count is paged's alone)
        skip = {"run_id", "allocator", "allocator_label", "wall_s", "schedule_s_per_token", "sharing_saving_block_frac",
                "mem_external_frac", "mem_cached_frac"}
        differ = {k for k in paged if k not in skip and not _allocator_record(k) and paged[k] != other.get(k)}
        assert not differ, (name, differ)
        assert paged["mem_external_frac"] + paged["mem_cached_frac"] == pytest.approx(
            other["mem_external_frac"] + other["mem_cached_frac"])


def _allocator_record(column: str) -> bool:
    """The allocator group's own recorded leaves (cfg.allocator.*) and the set of recorded keys differ
    between two allocators by construction; every other setting and every measurement must match."""
    return column.startswith("cfg.allocator.") or column == "cfg_keys"
