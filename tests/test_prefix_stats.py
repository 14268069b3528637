"""Prefix and tier hits counted as vLLM v1 counts them (allocators.prefix_stats): first admissions
(``prefix_*``, ``tier_hit_rate_*``) apart from the re-admissions of preempted sequences
(``preempted_*``), on hand-made cases; no run passes its trace's reuse ceiling."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from allocators import build
from allocators.tiers import TierStack
from kvbench.engine import Engine, SchedulerConfig
from kvbench.requests import Request
from kvbench.run.lifecycle import check_reuse_ceiling

sys.path.insert(0, str(Path(__file__).parent))
from engine_helpers import TokenPoolExecutor, seq_lookup  # noqa: E402

S = list(range(1, 9))  # two 4-token blocks both requests share


@pytest.mark.parametrize("name", ["paged_prefix", "radix"])
def test_a_preempted_request_rehitting_its_own_blocks_is_counted_apart(name):
    """Five 4-token blocks; R0 (S + [100], 6 outputs) at t=0, R1 (S + [200], 6 outputs) at t=1,
    one token per second each.
      t=0  R0 admitted: 2 blocks queried (prompt[:-1] = S), 0 hit; takes 3 blocks; its prefill
           commits S's two blocks.
      t=1  R1 admitted: 2 queried, 2 hit (S, 8 tokens); takes 1 fresh block (4 of 5 in use).
      t=4  R0's position 12 takes the last free block; R1 fills its block (positions 8..11).
      t=5  R1's position 12 finds no block: R1 (the newest) is preempted by recompute; its full
           block stays cached, S stays with R0.
           R0 finishes (15 tokens); R1 comes back with its 13 tokens (9 prompt + 4 generated):
           3 blocks queried (12 tokens), all 3 hit (S and its own block).
    First admissions: 4 blocks queried, 2 hit (16 prompt tokens bar the last, 8 hit): 0.5 both.
    Re-admissions: 1 request, 12 tokens queried, 12 hit. Counted together (before) it read 5/7."""
    alloc = build(name, 20, block_size=4, debug=True)
    requests = [Request(0, S + [100], 6, 0.0), Request(1, S + [200], 6, 1.0)]
    executor = TokenPoolExecutor(alloc.num_slots, context_seeded=True)
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=64))
    executor.lookup = seq_lookup(engine)
    out = engine.run(requests)
    assert out.summary["num_preemptions"] == 1 and out.summary["num_finished"] == 2
    stats = alloc.stats()
    assert (stats["prefix_requests"], stats["prefix_queries"], stats["prefix_hits"]) == (2, 4, 2)
    assert stats["prefix_hit_rate"] == stats["prefix_token_hit_rate"] == 0.5
    assert out.summary["prefix_hit_rate"] == 0.5
    assert (stats["preempted_requests"], stats["preempted_queries"], stats["preempted_hits"]) == (1, 12, 12)
    assert stats["preempted_prefix_hit_rate"] == stats["preempted_prefix_token_hit_rate"] == 1.0


def test_the_tiers_count_a_preempted_requests_loads_apart():
    """Four 4-token GPU blocks, a host tier of 8 one-block chunks (write-through). A (9 tokens)
    computed and freed, B (16 tokens) evicts A's two cached blocks; a preempted sequence then
    re-admits with A: both blocks come from the host, counted under preempted_* only."""
    a = build("paged_prefix", 16, block_size=4, debug=True)
    a.attach_tiers(TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=4, host_bytes=32, debug=True))
    A, B = list(range(9)), list(range(100, 116))
    for seq_id, tokens in ((0, A), (1, B)):
        assert a.admit(seq_id, tokens, 64).num_cached_tokens == 0
        a.grow(seq_id, len(tokens), tokens)
        a.commit()
        a.free(seq_id)
    a.note_preempted(2)
    assert a.admit(2, A, 64).num_cached_tokens == 8
    s = a.stats()
    # first admissions: A (8 tokens bar the last) and B (15), nothing hit
    assert (s["tier_hit_rate_gpu"], s["tier_hit_rate_host"], s["tier_hit_rate_total"]) == (0.0, 0.0, 0.0)
    assert (s["preempted_tier_hit_rate_gpu"], s["preempted_tier_hit_rate_host"]) == (0.0, 1.0)
    assert s["preempted_tier_hit_rate_total"] == 1.0 and s["preempted_tier_hit_rate_disk"] is None
    assert s["tier_recompute_tokens_saved"] == 8  # the load saved its recompute all the same
    assert (s["preempted_requests"], s["preempted_queries"], s["preempted_hits"]) == (1, 8, 0)


@pytest.mark.parametrize("name", ["hybrid_prefix", "lcm_prefix"])
def test_the_grouped_prefix_caches_count_a_readmission_apart(name):
    a = build(name, 1000, block_size=4, groups=[("full", None, 10, 0), ("window", 8, 52, 0)], prefill_chunk=4,
              debug=True)
    first = list(range(24))
    assert a.admit(1, first, 40).ok
    for start in range(0, 24, 4):
        a.grow(1, 4, first[start:start + 4])
        a.commit()
    a.note_preempted(1)
    a.free(1)
    assert a.admit(1, first + [7], 40).num_cached_tokens == 24  # its own blocks, hit again
    s = a.stats()
    assert (s["prefix_requests"], s["prefix_hits"], s["prefix_token_hit_rate"]) == (1, 0, 0.0)
    assert (s["preempted_requests"], s["preempted_queries"], s["preempted_hits"]) == (1, 24, 24)


def test_a_hit_rate_past_the_reuse_ceiling_fails_the_debug_check():
    row = {"trace_reuse_ceiling": 0.2, "tier_hit_rate_total": 0.2, "prefix_requests": 10}
    check_reuse_ceiling(row, 10)
    check_reuse_ceiling({**row, "tier_hit_rate_total": 0.3}, 11)  # not every request admitted: no claim
    with pytest.raises(AssertionError, match="ceiling"):
        check_reuse_ceiling({**row, "tier_hit_rate_total": 0.2001}, 10)


def _mooncake(tmp_path, *overrides):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR
    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "model=llama-3-8b", "model.max_model_len=32768", "gpu=h100-80gb", "backend=sim",
            "allocator=paged_prefix", "allocator.block_size=16", "logger=none", "progress=false",
            "metrics.report=false", f"results_dir={tmp_path / 'r'}", *overrides])
    return run(cfg)


@pytest.mark.parametrize("workload,seconds", [("mooncake_conversation", 60), ("mooncake_synthetic", 30)])
@pytest.mark.parametrize("offload", ["none", "host", "host_disk"])
def test_no_run_passes_its_traces_reuse_ceiling_even_under_heavy_preemption(tmp_path, workload, seconds, offload):
    """A 5 GB KV pool (about one 32K request) preempts by recompute; the preempted requests hit
    their own blocks again, which the first-admission rates leave out."""
    s = _mooncake(tmp_path, f"workload={workload}", f"workload.duration_s={seconds}", "engine.kv_cache_bytes=5e9",
                  f"offload={offload}")
    assert s["num_preemptions"] > 0 and s["preempted_requests"] == s["num_preemptions"]
    assert s["prefix_requests"] == s["num_requests"] == s["num_finished"]
    assert s["tier_hit_rate_total"] <= s["trace_reuse_ceiling"]
    assert s["prefix_token_hit_rate"] <= s["tier_hit_rate_total"]
    assert s["preempted_tier_hit_rate_total"] > s["trace_reuse_ceiling"]  # they re-hit their own prompts
    check_reuse_ceiling(s, s["num_requests"])
