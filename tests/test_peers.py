"""The engines' own KV managers on kvbench's seam (optional extra ``peers``, ``make peers``).

Without vLLM installed only the refusal is tested; the rest is the slow tier and skips.
The differential runs record the op stream kvbench's engine makes on ``paged_prefix`` and
replay it on vLLM's KVCacheManager (``kvbench.peers.diff``).
"""
from __future__ import annotations

import importlib.util

import pytest

from allocators import AllocatorError, Fit, build
from kvbench.peers import build_peer

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed (make peers)")


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed")
def test_peer_without_its_engine_is_refused_in_one_line():
    with pytest.raises(AllocatorError, match=r"optional extra 'peers'.*make peers") as info:
        build_peer("vllm-v1", 64, block_size=4)
    assert "\n" not in str(info.value)


# ---- slow: vLLM installed ----------------------------------------------------------------------
def _peer(num_slots: int = 32, block_size: int = 4, **knobs):
    return build_peer("vllm-v1", num_slots, block_size=block_size, debug=True, **knobs)


@pytest.mark.slow
@needs_vllm
def test_block_ids_and_free_queue_follow_vllm():
    """kvbench block b is vLLM block b + 1 (vLLM keeps block 0 as its null block)."""
    a = _peer()  # 8 blocks of 4
    assert a.admit(0, list(range(10)), 32).ok
    assert a.grow(0, 10, list(range(10))) == list(range(10))
    assert a.block_table(0) == [0, 1, 2]
    assert a.grow(0, 3, [50, 51, 52]) == [10, 11, 12]
    assert a.block_table(0) == [0, 1, 2, 3]
    assert a.usage({0: 20}).token == 13 and a.usage({0: 20}).reserved == 3
    a.free(0)
    # hashed full blocks to the back (LRU), unhashed partial block to the front, tail first
    assert a.free_blocks() == [3, 4, 5, 6, 7, 2, 1, 0]
    assert a.cached_blocks() == [2, 1, 0]


@pytest.mark.slow
@needs_vllm
def test_prefix_hit_matches_paged_prefix():
    for alloc in (_peer(cache_at="commit"), build("paged_prefix", 32, block_size=4, debug=True)):
        assert alloc.admit(0, list(range(9)), 32).ok
        alloc.grow(0, 9, list(range(9)))
        alloc.commit()
        second = alloc.admit(1, list(range(9)) + [99], 32)
        assert (second.fit, second.num_cached_tokens) == (Fit.OK, 8), alloc.name


@pytest.mark.slow
@needs_vllm
def test_vllm_caches_a_duplicate_block_that_paged_prefix_keeps_private():
    """Two sequences compute the same prompt before either commits: kvbench registers the first
    block of each hash and keeps the duplicate private (external once freed); vLLM registers
    both under the same hash (cached once freed). The only rule the differential runs hit."""
    ours, theirs = build("paged_prefix", 32, block_size=4, debug=True), _peer(cache_at="commit")
    for alloc in (ours, theirs):
        for seq in (0, 1):
            assert alloc.admit(seq, list(range(8)) + [seq], 32).num_cached_tokens == 0
            alloc.grow(seq, 9, list(range(8)) + [seq])
        alloc.commit()
        alloc.free(0)
        alloc.free(1)
    assert ours.usage({}).cached == 2 * 4 and theirs.usage({}).cached == 4 * 4
    assert ours.usage({}).paper_external == theirs.usage({}).paper_external == 32


@pytest.mark.slow
@needs_vllm
def test_schedule_time_caching_lets_a_same_step_admission_hit():
    """vLLM registers a block's hash when its step is scheduled; kvbench only after the forward."""
    for cache_at, hit in (("schedule", 8), ("commit", 0)):
        a = _peer(cache_at=cache_at)
        a.admit(0, list(range(9)), 32)
        a.grow(0, 9, list(range(9)))
        assert a.admit(1, list(range(9)) + [7], 32).num_cached_tokens == hit


@pytest.mark.slow
@needs_vllm
def test_fork_takes_cached_blocks_and_copies_the_partial_tail():
    a = _peer()
    a.admit(0, list(range(10)), 32)
    a.grow(0, 10, list(range(10)))
    assert a.fork(0, 1)
    table0, table1 = a.block_table(0), a.block_table(1)
    assert table1[:2] == table0[:2] and table1[2] != table0[2]  # full blocks shared by hash
    [op] = a.take_copy_ops()
    assert (op.src, op.dst, op.length) == (table0[2] * 4, table1[2] * 4, 2)
    assert a.num_tokens(1) == 10


@pytest.mark.slow
@needs_vllm
def test_out_of_memory_grow_and_refused_admit_change_nothing():
    a = _peer(num_slots=16)  # 4 blocks
    assert a.admit(0, list(range(12)), 16).ok
    a.grow(0, 12, list(range(12)))
    assert a.admit(1, list(range(100, 108)), 16).fit is Fit.LATER
    a.grow(0, 4, [1, 2, 3, 4])
    assert a.grow(0, 0) == [] and a.usage({0: 16}).external == 0
    assert a.admit(2, list(range(40)), 64).fit is Fit.NEVER
    a.check_invariants()


WORKLOADS = {
    "sharegpt-pressure": ["workload=sharegpt", "workload.num_requests=100", "engine.kv_cache_bytes=2e8"],
    "sharegpt-swap": ["workload=sharegpt", "workload.num_requests=80", "engine.kv_cache_bytes=3e8",
                      "engine.preemption=swap"],
    "system-prompts": ["workload=system_prompts", "workload.num_requests=80", "engine.kv_cache_bytes=3e8"],
    "multiturn": ["workload=multiturn", "workload.num_requests=40", "engine.kv_cache_bytes=3e8"],
    "shared-prefix": ["workload=shared_prefix", "workload.num_requests=60"],
}


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_engine_op_stream_replays_identically_on_vllm(name):
    """Every admission (cached tokens), grow, fork and step's memory breakdown equal; the one
    allowed difference is the duplicate rule above: cached vs external slots, their sum equal."""
    from kvbench.peers.diff import record, replay

    ops, summary = record(["allocator=paged_prefix", *WORKLOADS[name]])
    assert summary["num_finished"] > 0
    peer = _peer(num_slots=int(summary["kv_slots"]), block_size=int(summary["block_size"]), cache_at="commit")
    peer.debug = False
    report = replay(ops, peer)
    assert report.diverged_at is None and report.replayed == len(ops), report.differences[:3]
    for _, op, ours, theirs in report.differences:
        assert op == "usage", (op, ours, theirs)
        assert ours[:3] == theirs[:3] and ours[3] + ours[4] == theirs[3] + theirs[4]
        assert theirs[4] > ours[4]  # vLLM holds the duplicates as cached
    # hits counted as vLLM counts them: re-admissions of preempted sequences apart, in kvbench's
    # books and in vLLM's own PrefixCacheStats (its hits in tokens)
    from kvbench.run.lifecycle import PREEMPTED_LOOKUP_COLUMNS

    stats = peer.stats()
    for key in ("prefix_hit_rate", "prefix_token_hit_rate", *PREEMPTED_LOOKUP_COLUMNS):
        assert stats[key] == summary[key], key
    assert (stats["vllm_requests"], stats["vllm_preempted_requests"]) == (summary["prefix_requests"],
                                                                          summary["preempted_requests"])
    assert stats["vllm_preempted_hits"] == summary["preempted_hits"]
    if name in ("sharegpt-pressure", "sharegpt-swap"):
        assert summary["preempted_requests"] > 0
