"""vLLM's CPU offloading manager (``vllm.v1.kv_offload.cpu.manager``) against kvbench's host tier.

Both are driven with one stream of kvbench's tier traffic: for each request in arrival order
(every turn of a conversation), the chained hashes of its prompt's chunks (``paged_prefix``'s
hash chain, one chunk of ``block_tokens`` tokens); a lookup of the chunks before the last
prompt token (leading chunks held in the tier: the hit length), a load of the hits, then a store
of the chunks the request computed. Each request's hit length and the chunks its stores evicted
are compared.

The two sides use each engine's own protocol, with nothing of either re-implemented:
  * kvbench: ``allocators.tiers.TierStack`` (host tier only, write-through): ``where`` per chunk,
    ``load`` and ``computed`` for each hit (an access), ``computed`` for each new chunk, in prefix
    order; an access or store updates the policy at once.
  * vLLM: ``CPUOffloadingManager`` as its offloading connector's scheduler side calls it:
    ``on_new_request``, ``lookup`` per chunk until a miss, ``prepare_load``/``complete_load`` of
    the hits, ``prepare_store``/``complete_store`` of the new chunks (one offer), then
    ``on_request_finished``, which commits the request's recency (tail chunks before head ones).

Simplifications, said once: requests run one after another (no two in flight, so no chunk is
pinned by a load while another request stores), and a request's new chunks are offered in one
store (vLLM's connector offers them step by step as prefill completes them; kvbench's engine
stores each as its blocks are committed).

    PYTHONPATH=<peers>:. python -m kvbench.peers.vllm_offload workload=multiturn --policy lru
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

from allocators.paged_prefix import ROOT_HASH, PagedPrefixAllocator
from allocators.tiers import TierStack
from kvbench.config.errors import CONF_DIR
from kvbench.requests import Request, later_turns
from kvbench.workloads import build_workload

POLICIES = ("lru", "arc")  # the policies vLLM 0.33.0 ships


@dataclass(frozen=True, slots=True)
class TierRequest:
    """One request's tier traffic: its prompt's chunk keys and how many of them a lookup asks."""

    request_id: int
    keys: tuple[int, ...]  # chained hashes of the prompt's full chunks, in prefix order
    num_query: int  # chunks wholly before the prompt's last token


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one request saw: its hit length in chunks and the chunk keys its stores evicted."""

    hit_chunks: int
    evicted: frozenset[int]


def chunk_keys(prompt: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """The chained hashes of ``prompt``'s full chunks, as ``paged_prefix`` hashes its blocks."""
    keys, parent = [], ROOT_HASH
    for i in range(len(prompt) // block_tokens):
        parent = PagedPrefixAllocator._hash_block(parent, tuple(prompt[i * block_tokens:(i + 1) * block_tokens]))
        keys.append(parent)
    return tuple(keys)


def traffic(requests: Iterable[Request], block_tokens: int) -> list[TierRequest]:
    """Every turn of ``requests`` in arrival order (a conversation's later turns right after its
    first: their replies are placeholders of the dataset's length, as ``later_turns`` builds them)."""
    out = []
    for request in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
        for turn in [request, *later_turns(request)]:
            prompt = turn.prompt_ids
            out.append(TierRequest(turn.request_id, chunk_keys(prompt, block_tokens),
                                   max(len(prompt) - 1, 0) // block_tokens))
    return out


ORDERS = ("prefix", "tail_first")


def replay_kvbench(stream: Sequence[TierRequest], capacity_chunks: int, policy: str,
                   order: str = "prefix") -> list[Outcome]:
    """The stream through kvbench's host tier (1 byte per slot, chunk = one GPU block).

    ``order="prefix"`` is kvbench's engine: hits accessed and new chunks stored head first, as
    their blocks are committed, each store making its own room. ``"tail_first"`` is the
    differential's control for how vLLM's manager treats one request: room for the whole offer
    is made first (``Tier.pin`` then ``unpin``: the policy evicts, none of the offer can be a
    victim; an offer larger than the tier is not stored), new chunks are stored tail first and
    the hits accessed again tail first, so the request's head is the most recent. What
    differs under the control is the policies themselves (``tests/test_peers_offload.py``)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    tiers = TierStack(slot_bytes=1, gpu_block_tokens=1, block_tokens=1, host_bytes=capacity_chunks,
                      host_policy=policy, write="through")
    host, out = tiers.host, []
    for req in stream:
        hits = 0
        for key in req.keys[:req.num_query]:
            if tiers.where(key) != "host":
                break
            hits += 1
        before = set(host.held)
        new = req.keys[hits:]
        if order == "prefix":
            for key in req.keys[:hits]:
                tiers.load(key, "host", 1)
                tiers.computed(key)
            for key in new:
                tiers.computed(key)
        else:
            for key in reversed(req.keys[:hits]):
                tiers.load(key, "host", 1)
            offer = [key for key in new if key not in host.held]
            if len(offer) > capacity_chunks:
                new = ()  # vLLM refuses an offer larger than the tier whole
            elif host.pin(len(offer)) is not None:
                host.unpin(len(offer))  # room for the whole offer first: none of it is a victim
            for key in reversed(new):
                tiers.computed(key)
            for key in reversed(req.keys[:hits]):
                tiers.computed(key)  # held: an access; the new chunks already stand tail oldest
        out.append(Outcome(hits, frozenset((before | set(new)) - set(host.held))))
    return out


def _vkey(key: int) -> bytes:
    return make_offload_key((key & (2**64 - 1)).to_bytes(8, "big"), 0)


def replay_vllm(stream: Sequence[TierRequest], capacity_chunks: int, policy: str,
                block_tokens: int = 1) -> list[Outcome]:
    """The stream through vLLM's ``CPUOffloadingManager`` with its ``policy``."""
    manager = CPUOffloadingManager(num_chunks=capacity_chunks, cache_policy=policy)
    back: dict[bytes, int] = {}
    out = []
    for req in stream:
        vkeys = [_vkey(k) for k in req.keys]
        back.update(zip(vkeys, req.keys))
        ctx = ReqContext(req_id=f"{req.request_id}-{len(out)}")
        for i, key in enumerate(vkeys):
            ctx.set_offload_key_position(key, (i + 1) * block_tokens)
        manager.on_new_request(ctx)
        hits = 0
        for key in vkeys[:req.num_query]:
            if manager.lookup(key, ctx) is not LookupResult.HIT:
                break
            hits += 1
        if hits:
            manager.prepare_load(vkeys[:hits], ctx)
            manager.complete_load(vkeys[:hits], ctx)
        evicted: frozenset[int] = frozenset()
        if vkeys[hits:]:
            store = manager.prepare_store(vkeys[hits:], ctx)
            if store is not None:
                manager.complete_store(store.keys_to_store, ctx)
                evicted = frozenset(back[k] for k in store.evicted_keys)
        manager.on_request_finished(ctx)
        out.append(Outcome(hits, evicted))
    return out


@dataclass(frozen=True, slots=True)
class Difference:
    index: int  # position in the stream
    request_id: int
    kvbench: Outcome
    vllm: Outcome


def differential(stream: Sequence[TierRequest], capacity_chunks: int, policy: str,
                 order: str = "prefix") -> list[Difference]:
    """Every request whose hit length or evicted chunks differ between the two."""
    ours = replay_kvbench(stream, capacity_chunks, policy, order)
    theirs = replay_vllm(stream, capacity_chunks, policy)
    return [Difference(i, req.request_id, a, b)
            for i, (req, a, b) in enumerate(zip(stream, ours, theirs)) if a != b]


def _stream_from_overrides(overrides: list[str], block_tokens: int) -> list[TierRequest]:
    from hydra import compose, initialize_config_dir  # start-up time: only the command composes

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    workload = build_workload(cfg.workload, vocab_size=int(cfg.model.vocab_size),
                              max_model_len=int(cfg.model.max_model_len),
                              tokenizer_name=cfg.model.get("tokenizer"))
    return traffic(workload.requests, block_tokens)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides choosing the workload")
    parser.add_argument("--policy", choices=POLICIES, default="lru")
    parser.add_argument("--block-tokens", type=int, default=16)
    parser.add_argument("--capacity-chunks", type=int, default=256)
    parser.add_argument("--capacity-frac", type=float, default=None,
                        help="the tier as this fraction of the stream's distinct chunks (instead of --capacity-chunks)")
    parser.add_argument("--order", choices=ORDERS, default="prefix",
                        help="kvbench's call order (tail_first: vLLM's ranking of a request's chunks)")
    args = parser.parse_args(argv)
    if args.block_tokens < 1 or args.capacity_chunks < 1:
        print("--block-tokens and --capacity-chunks must be >= 1", file=sys.stderr)
        return 2
    stream = _stream_from_overrides(args.overrides, args.block_tokens)
    distinct = len({key for req in stream for key in req.keys})
    if args.capacity_frac is not None:
        args.capacity_chunks = max(8, int(distinct * args.capacity_frac))
    diffs = differential(stream, args.capacity_chunks, args.policy, args.order)
    lookups = sum(1 for d in diffs if d.kvbench.hit_chunks != d.vllm.hit_chunks)
    evictions = sum(1 for d in diffs if d.kvbench.evicted != d.vllm.evicted)
    print(f"{len(stream)} requests, {distinct} distinct chunks; policy {args.policy}, "
          f"{args.capacity_chunks} chunks of {args.block_tokens} tokens, kvbench order {args.order}: {lookups} hit lengths and "
          f"{evictions} eviction sets differ")
    for d in diffs[:5]:
        print(f"  #{d.index} request {d.request_id}: kvbench {d.kvbench.hit_chunks} hits, "
              f"{len(d.kvbench.evicted)} evicted; vllm {d.vllm.hit_chunks} hits, {len(d.vllm.evicted)} evicted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
