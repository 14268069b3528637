"""kvbench's host tier against vLLM's CPU offloading manager (``kvbench.peers.vllm_offload``).

Each difference the differential finds is pinned here on a hand-made stream, with both sides'
answers: (1) the order of a request's chunks (kvbench stores and touches head first; vLLM ranks
a request's chunks tail first, head the most recent) and (2) how room is made (vLLM evicts for
the whole offer at once, none of it a victim, and refuses an offer larger than the tier). The
``tail_first`` replay does kvbench's calls in vLLM's order and makes room first: under it LRU
agrees on every lookup and eviction of three streams; what is left for ARC is (3) the ARC
variants themselves. Needs vLLM (``make peers``): skipped without it.
"""
from __future__ import annotations

import importlib.util

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed (make peers): the peer under test is absent")

if HAS_VLLM:
    from kvbench.peers.vllm_offload import (
        Outcome,
        TierRequest,
        _stream_from_overrides,
        differential,
        replay_kvbench,
        replay_vllm,
    )


def _req(i: int, *keys: int) -> TierRequest:
    return TierRequest(i, keys, len(keys))


def _out(hits: int, *evicted: int) -> Outcome:
    return Outcome(hits, frozenset(evicted))


def test_lru_vllm_evicts_a_requests_tail_first_kvbench_its_head():
    """(1) A (3 chunks), B (2 new) on 4 chunks, then A again: kvbench's LRU evicted A's head, so A
    finds nothing; vLLM evicted A's tail and A finds 2 chunks. The control order agrees with vLLM."""
    stream = [_req(0, 1, 2, 3), _req(1, 11, 12), _req(2, 1, 2, 3)]
    assert replay_kvbench(stream, 4, "lru") == [_out(0), _out(0, 1), _out(0, 11)]
    assert replay_vllm(stream, 4, "lru") == [_out(0), _out(0, 3), _out(2, 12)]
    assert replay_kvbench(stream, 4, "lru", "tail_first") == replay_vllm(stream, 4, "lru")


def test_an_offer_larger_than_the_tier_is_refused_whole_by_vllm():
    """(2) Two new chunks on a one-chunk tier: vLLM stores neither; kvbench stores each in turn,
    the second evicting the first."""
    stream = [_req(0, 30, 31), _req(1, 3)]
    assert replay_vllm(stream, 1, "arc") == [_out(0), _out(0)]
    assert replay_kvbench(stream, 1, "arc") == [_out(0, 30), _out(0, 31)]
    assert replay_kvbench(stream, 1, "arc", "tail_first") == replay_vllm(stream, 1, "arc")


def test_arc_vllm_makes_room_for_the_whole_offer_before_storing():
    """(2) 1 reused (so in T2), then an offer of two on two chunks: kvbench's ARC, storing chunk by
    chunk, evicts the request's own first chunk from T1; vLLM makes room first and evicts 1."""
    stream = [_req(0, 1), _req(1, 1), _req(2, 30, 31)]
    assert replay_kvbench(stream, 2, "arc") == [_out(0), _out(1), _out(0, 30)]
    assert replay_vllm(stream, 2, "arc") == [_out(0), _out(1), _out(0, 1)]
    assert replay_kvbench(stream, 2, "arc", "tail_first") == replay_vllm(stream, 2, "arc")


def test_arc_variants_differ_on_when_a_reuse_promotes_and_a_ghost_adapts():
    """(3) Left under the control. A = (20, 21), then 1, then A again on two chunks (21 is a
    ghost in B1 by then, 20 in T1). vLLM's ARC moves a reused chunk to T2 only when its request
    finishes and learns from the ghost hit (p = 1) before it makes room: it evicts 20, the chunk
    this request just loaded. kvbench's ARC (Megiddo and Modha's: promote at the access, adapt
    when the ghost is stored) has 20 in T2 already and evicts the once-seen 1 from T1."""
    stream = [_req(0, 20, 21), _req(1, 1), _req(2, 20, 21)]
    assert replay_kvbench(stream, 2, "arc", "tail_first") == [_out(0), _out(0, 21), _out(1, 1)]
    assert replay_vllm(stream, 2, "arc") == [_out(0), _out(0, 21), _out(1, 20)]


STREAMS = {
    "sharegpt-multiturn": ["workload=multiturn", "workload.num_requests=60"],
    "mooncake": ["workload=mooncake_conversation", "workload.duration_s=30", "model=llama-3-8b"],
    "zipf-shared-prefix": ["workload=system_prompts", "workload.base=synthetic", "workload.num_requests=200", "model=llama-3-8b",
                           "workload.system_prompt_lens=[256,512,1024,2048,4096]"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", STREAMS)
def test_lru_agrees_on_every_lookup_and_eviction_once_the_order_is_vllms(name):
    """The whole LRU difference on real streams is (1) and (2): under the control order every
    request's hit length and evicted chunks equal vLLM's; in kvbench's own order evictions differ."""
    stream = _stream_from_overrides(STREAMS[name], 16)
    distinct = len({key for req in stream for key in req.keys})
    capacity = max(8, distinct // 5)
    assert differential(stream, capacity, "lru", "tail_first") == []
    assert differential(stream, capacity, "lru", "prefix")  # the head-first order shows
