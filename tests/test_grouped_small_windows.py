"""Windows and chunks smaller than a block (issue 53, part 4): every grouped allocator serves the
requests that fit, and ``hybrid_static``'s default split holds what its admit and grow take.

The case of the issue: a window of 3 tokens, blocks of 4, a 64-slot pool, chunked prefill.
``hybrid_static`` used to size the window pool for "window + one chunk" tokens, rounded down to
whole blocks of its share, while admit takes that many tokens' blocks rounded up (and a grow
at a poor alignment one more): it refused most prompts ("prompt needs N blocks ...") that
``uniform``, ``hybrid``, ``lcm`` and the prefix ones serve.
"""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from allocators import GROUPED, Fit, build
from allocators.grouped import GroupSpec, most_blocks_held
from kvbench.config.errors import CONF_DIR
from kvbench.config.spec import model_geometry

SMALL = [("full", None, 1, 0), ("window", 3, 1, 0)]  # one byte a token in each group


def test_the_most_blocks_a_window_of_3_holds_at_blocks_of_4():
    window = GroupSpec("window", 3, 1, 0)
    # chunks of 8: admit takes min(P, 3 + 8) = 11 tokens' blocks (3); a grow of 8 from position 5
    # reads from position 3: positions 3..12 lie in blocks 0..3, four blocks
    assert most_blocks_held(window, 100, 4, 8) == 4
    assert most_blocks_held(window, 7, 4, 8) == 2  # a request of 7 tokens has 2 blocks at all
    assert most_blocks_held(window, 100, 4, 1) == 2  # decoding: positions n-2..n may straddle two blocks
    assert most_blocks_held(GroupSpec("chunked", 3, 1, 0), 100, 4, 8) == 4
    assert most_blocks_held(GroupSpec("full", None, 1, 0), 100, 4, 8) == 25
    assert most_blocks_held(GroupSpec("state", None, 0, 9), 100, 4, 8) == 1


def test_a_grow_holds_those_four_blocks():
    a = build("hybrid", 64, block_size=4, groups=SMALL, prefill_chunk=8, debug=True)
    assert a.admit(1, [0] * 13, 20).ok
    assert len(a.group_tables(1)[1]) == 3  # admit: 11 tokens' blocks
    a.grow(1, 5)
    a.grow(1, 8)  # positions 5..12, reading from 3: blocks 0..3
    assert sum(b >= 0 for b in a.group_tables(1)[1]) == 4


def test_hybrid_static_splits_in_whole_blocks_for_the_longest_request_the_pool_holds():
    a = build("hybrid_static", 64, block_size=4, groups=SMALL, prefill_chunk=8, max_model_len=256, debug=True)
    # split_len 128 needs 32 + 4 blocks, more than the 32 of the pool (128 bytes); the longest
    # request it holds is 112 tokens: 28 full blocks + 4 window blocks = 32. Shares 112 and 16 bytes.
    assert a.pool.num_blocks == [28, 4]
    for length in range(1, 64):  # any prompt of a request that fits max_model_len is admitted alone
        assert a.admit(length, [0] * length, 256).ok
        a.free(length)


def _serve_alone(name: str, groups, prompt: int, output: int, chunk: int) -> bool:
    """Admit, prefill in chunks of ``chunk`` from every alignment a decode leaves, decode: all granted."""
    knobs = dict(max_model_len=256) if name == "hybrid_static" else {}
    a = build(name, 64, block_size=4, groups=groups, prefill_chunk=chunk, debug=True, **knobs)
    if not a.admit(1, list(range(prompt)), prompt + output).ok:
        return False
    done, first = 0, min(prompt, 1 + prompt % chunk)  # a short first chunk shifts the later ones
    for n in [first] + [chunk] * prompt:
        n = min(n, prompt - done)
        if n and a.grow(1, n) is None:
            return False
        done += n
    return all(a.grow(1, 1) is not None for _ in range(output))


@pytest.mark.parametrize("name", GROUPED)
@pytest.mark.parametrize("kind,size", [("window", 1), ("window", 2), ("window", 3), ("chunked", 3)])
@pytest.mark.parametrize("chunk", [1, 3, 4, 8])
def test_every_grouped_allocator_serves_any_request_that_fits(name, kind, size, chunk):
    groups = [("full", None, 1, 0), (kind, size, 1, 0)]
    for prompt in range(1, 57):
        assert _serve_alone(name, groups, prompt, 64 // 2 - prompt // 2, chunk), f"{name}: prompt {prompt}"


@pytest.mark.parametrize("name", GROUPED)
def test_the_issues_run_serves_every_request(name, tmp_path):
    """Gemma-2-2B with a 3-token window, blocks of 4, 64 slots, 8-token steps: 8 of 8 served
    (hybrid_static served 2 of 8 before)."""
    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        model = ["model=gemma-2-2b", "model.sliding_window=3", "model.max_model_len=256"]
        slot = model_geometry(compose("config", overrides=model).model).bytes_per_slot
        cfg = compose("config", overrides=[
            "backend=sim", "logger=none", "progress=false", f"allocator={name}", *model, "allocator.block_size=4",
            f"engine.kv_cache_bytes={64 * slot}", "engine.max_num_batched_tokens=8", "workload=synthetic",
            "workload.num_requests=8", "workload.distribution=uniform", "workload.prompt_min=4",
            "workload.prompt_max=40", "workload.output_min=2", "workload.output_max=16", f"results_dir={tmp_path}"])
    summary = run(cfg)
    assert (summary["kv_slots"], summary["num_finished"], summary["num_rejected"]) == (64, 8, 0)


def test_a_refusal_names_each_groups_blocks():
    a = build("hybrid_static", 64, block_size=4, groups=SMALL, prefill_chunk=8, ratios=[7, 1], debug=True)
    # pools of 112 and 16 bytes: 28 full blocks, 4 window blocks; 120 tokens need 30 and 3
    admission = a.admit(1, [0] * 120, 128)
    assert admission.fit is Fit.NEVER
    assert admission.reason == "prompt of 120 tokens needs full 30 + window 3 blocks; the pool cannot hold them"
