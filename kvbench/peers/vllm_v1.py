"""vLLM v1's own ``KVCacheManager`` (``vllm.v1.core.kv_cache_manager``) behind kvbench's seam.

Nothing of vLLM's block books is re-implemented here: admission asks vLLM for the computed
(prefix-cached) blocks and then ``allocate_slots``; a grow is ``allocate_slots`` for the new
tokens; a free is vLLM's ``free`` (tail blocks first; unhashed blocks to the front of its free
queue, hashed ones to the back). kvbench reads the block tables and the free queue back.

Mapping onto the seam:
  * vLLM keeps block 0 as its null block, so its pool gets ``num_blocks + 1`` blocks and
    kvbench block ``b`` is vLLM block ``b + 1``: both pools offer the same usable slots.
  * ``cache_at="schedule"`` (default) registers a block's hash when the step that computes it
    is scheduled (the grow), as vLLM's scheduler does through ``allocate_slots``; a request
    admitted later in the same step may then hit it (vLLM writes a layer's K/V before its
    attention reads it). ``cache_at="commit"`` registers hashes at ``commit()``, after the
    forward, which is kvbench's ``paged_prefix`` rule: the differential tests use it.
  * ``fork``: vLLM v1 has no fork (parallel samples are separate requests that share the
    prompt through the prefix cache). The child is a new request over the parent's computed
    tokens: it takes the parent's cached full blocks by hash and copies the rest (the
    uncached blocks and the partial last block) with copy ops.
  * A grow of tokens whose ids are unknown (``token_ids=None`` past the prompt) appends
    unique negative ids, so those blocks never match (kvbench: unhashable).
  * ``note_preempted``: the request's later admissions are re-admissions; the adapter sets
    ``Request.num_preemptions`` so that vLLM's own ``KVCacheManager.record_prefix_cache_stats``
    (vllm/v1/core/kv_cache_manager.py, called at admission) files them under
    ``PrefixCacheStats.preempted_*`` (vllm/v1/metrics/stats.py); ``stats()`` gives those
    (``vllm_*``, tokens over ``request.num_tokens``) beside kvbench's split.
  * ``enable_caching=False`` is vLLM's prefix caching off: a plain paged pool, whose free
    queue reuses blocks last-in first-out (kvbench's ``paged`` reuses first-in first-out).
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

from allocators.base import (
    Admission,
    Allocator,
    AllocatorError,
    CopyOp,
    Fit,
    MemoryUsage,
    ceil_div,
    check_block_size,
    grow_end,
    refuse_never,
)
from allocators.paged import _empty_split
from allocators.prefix_stats import PrefixLookups

VLLM_VERSION = "0.33.0"  # the version the adapter and its differential tests were written against
CACHE_AT = ("schedule", "commit")


@dataclass(slots=True)
class _Seq:
    request: Request
    num_tokens: int  # computed tokens (vLLM's num_computed_tokens)
    prompt_len: int
    max_len: int


class VllmV1Allocator(Allocator):
    """vLLM v1's KVCacheManager over ``num_slots`` slots; see the module docstring."""

    name = "vllm-v1"

    def __init__(self, num_slots: int, block_size: int = 16, enable_caching: bool = True,
                 cache_at: str = "schedule", debug: bool = False) -> None:
        self.block_size = check_block_size(block_size, num_slots)
        if not isinstance(enable_caching, bool):
            raise AllocatorError(f"enable_caching must be true or false, got {enable_caching!r}")
        if cache_at not in CACHE_AT:
            raise AllocatorError(f"cache_at must be one of {', '.join(CACHE_AT)}, got {cache_at!r}")
        self.num_blocks = num_slots // block_size
        self.num_slots = self.num_blocks * block_size
        self.enable_caching, self.cache_at, self.debug = enable_caching, cache_at, debug
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float16)
        config = KVCacheConfig(num_blocks=self.num_blocks + 1, kv_cache_tensors=[],
                               kv_cache_groups=[KVCacheGroupSpec(["kv"], spec)])
        init_none_hash(sha256)
        self._hasher = get_request_block_hasher(block_size, sha256) if enable_caching else None
        self._manager = KVCacheManager(config, max_model_len=self.num_slots, scheduler_block_size=block_size,
                                       hash_block_size=block_size, enable_caching=enable_caching, log_stats=True)
        self._pool = self._manager.block_pool
        # read-only view of vLLM's per-request block lists (one full-attention group)
        self._req_blocks = self._manager.coordinator.single_type_managers[0].req_to_blocks
        self._evictions = 0
        evict = self._pool._maybe_evict_cached_block  # counted, not replaced: vLLM still evicts

        def counted_evict(block) -> bool:
            evicted = evict(block)
            self._evictions += bool(evicted)
            return evicted

        self._pool._maybe_evict_cached_block = counted_evict
        self._seqs: dict[int, _Seq] = {}
        self._copy_ops: list[CopyOp] = []
        self._uncommitted: set[int] = set()
        self._unknown_ids = itertools.count(-1, -1)
        self._lookups = PrefixLookups()
        self._num_copy_ops = self._copied_slots = 0

    # -- helpers -----------------------------------------------------------------------------
    def _request(self, seq_id: int, tokens: Sequence[int], max_len: int) -> Request:
        params = SamplingParams(max_tokens=max(1, max_len - len(tokens)))
        return Request(str(seq_id), list(tokens), params, None, block_hasher=self._hasher)

    def _vllm_blocks(self, seq_id: int) -> list[int]:
        return [block.block_id for block in self._req_blocks[str(seq_id)]]

    def _slots(self, seq_id: int, start: int, end: int) -> list[int]:
        bs, blocks = self.block_size, self._req_blocks[str(seq_id)]
        return [(blocks[p // bs].block_id - 1) * bs + p % bs for p in range(start, end)]

    def _cache(self, seq_id: int, seq: _Seq) -> None:
        """Register the hashes of the sequence's full computed blocks, at the policy's moment."""
        if not self.enable_caching:
            return
        if self.cache_at == "schedule":
            self._manager.cache_blocks(seq.request, seq.num_tokens)
        else:
            self._uncommitted.add(seq_id)

    def _check(self) -> None:
        if self.debug:
            self.check_invariants()

    # -- lifecycle ---------------------------------------------------------------------------
    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        refusal = refuse_never(self._seqs, seq_id, prompt, max_len, final_len, self.block_size,
                               self.num_blocks, "blocks")
        if refusal is not None:
            return refusal
        need = ceil_div(len(prompt), self.block_size)
        request = self._request(seq_id, prompt, max_len)
        request.num_preemptions = int(seq_id in self._lookups.preempted_ids)
        hit_blocks, num_hit, _ = self._manager.get_computed_blocks(request)
        blocks = self._manager.allocate_slots(request, len(prompt) - num_hit, num_hit, hit_blocks,
                                              delay_cache_blocks=True)
        if blocks is None:
            return Admission(Fit.LATER, f"prompt needs {need - num_hit // self.block_size} new blocks; "
                                        f"{self._pool.get_num_free_blocks()} free")
        request.num_computed_tokens = num_hit
        self._seqs[seq_id] = _Seq(request, num_hit, len(prompt), max_len)
        if self.enable_caching and prompt:
            self._manager.record_prefix_cache_stats(request, num_hit)
            self._lookups.record(seq_id, queries=(len(prompt) - 1) // self.block_size, hits=num_hit // self.block_size,
                                 query_tokens=len(prompt) - 1, hit_tokens=num_hit)
        self._check()
        return Admission(Fit.OK, num_cached_tokens=num_hit)

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        end = grow_end(seq_id, seq, num_tokens, token_ids)
        request, start = seq.request, seq.num_tokens
        held = len(self._req_blocks[request.request_id])
        if ceil_div(end, self.block_size) - held > self._pool.get_num_free_blocks():
            return None
        known = request.num_tokens  # ids vLLM holds: the prompt, then every token grown past it
        if end > known:
            ids = list(token_ids[known - start:]) if token_ids is not None else None
            request.append_output_token_ids(ids if ids is not None else
                                            [next(self._unknown_ids) for _ in range(end - known)])
        if ceil_div(end, self.block_size) > held:
            request.num_computed_tokens = start
            if self._manager.allocate_slots(request, num_tokens, delay_cache_blocks=True) is None:
                raise AllocatorError(f"vLLM refused a grow that fits ({num_tokens} tokens of sequence {seq_id})")
        seq.num_tokens = request.num_computed_tokens = end
        self._cache(seq_id, seq)
        self._check()
        return self._slots(seq_id, start, end)

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise AllocatorError(f"sequence {child_id} is already live")
        computed = parent.num_tokens
        tokens = parent.request.all_token_ids[:computed]
        child = self._request(child_id, tokens, parent.max_len)
        hit_blocks, num_hit, _ = self._manager.get_computed_blocks(child, max_cache_hit_length=computed)
        if self._manager.allocate_slots(child, computed - num_hit, num_hit, hit_blocks,
                                        delay_cache_blocks=True) is None:
            return False
        seq = _Seq(child, computed, parent.prompt_len, parent.max_len)
        self._seqs[child_id] = seq
        child.num_computed_tokens = computed
        self._queue_copies(self._slots(parent_id, num_hit, computed), self._slots(child_id, num_hit, computed))
        self._cache(child_id, seq)
        self._check()
        return True

    def _queue_copies(self, src: list[int], dst: list[int]) -> None:
        """Copy ops for slot lists, one per run that is consecutive on both sides."""
        i = 0
        while i < len(src):
            j = i + 1
            while j < len(src) and src[j] == src[j - 1] + 1 and dst[j] == dst[j - 1] + 1:
                j += 1
            self._copy_ops.append(CopyOp(src[i], dst[i], j - i))
            self._num_copy_ops += 1
            self._copied_slots += j - i
            i = j

    def note_preempted(self, seq_id: int) -> None:
        self._lookups.note_preempted(seq_id)

    def free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        self._uncommitted.discard(seq_id)
        self._manager.free(seq.request)
        self._check()

    def commit(self) -> None:
        for seq_id in self._uncommitted:
            seq = self._seqs[seq_id]
            self._manager.cache_blocks(seq.request, seq.num_tokens)
        self._uncommitted.clear()

    # -- views -------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> list[int]:
        self._get(seq_id)
        return [b - 1 for b in self._vllm_blocks(seq_id)]

    def num_tokens(self, seq_id: int) -> int:
        return self._get(seq_id).num_tokens

    def live_sequences(self) -> list[int]:
        return list(self._seqs)

    def free_blocks(self) -> list[int]:
        """kvbench ids of vLLM's free queue, in the order it reuses them."""
        queue, out = self._pool.free_block_queue, []
        block = queue.fake_free_list_head.next_free_block
        while block is not None and block is not queue.fake_free_list_tail:
            out.append(block.block_id - 1)
            block = block.next_free_block
        return out

    def cached_blocks(self) -> list[int]:
        """Free blocks vLLM can still hit by hash, in eviction order."""
        blocks = self._pool.blocks
        return [b for b in self.free_blocks() if blocks[b + 1].block_hash is not None]

    def _split(self, final_lens: Mapping[int, int] | None) -> tuple[int, int, int, int]:
        """(used blocks, token slots, reserved, internal); a shared block counts once, its empty
        slots reserved when any owner's final length reaches them (kvbench's paged convention)."""
        bs = self.block_size
        blocks: dict[int, list[int]] = {}
        for seq_id, seq in self._seqs.items():
            final = 0
            if final_lens is not None:
                try:
                    final = final_lens[seq_id]
                except KeyError:
                    raise AllocatorError(f"usage() needs the final length of live sequence {seq_id}") from None
            for index, block in enumerate(self._vllm_blocks(seq_id)):
                base = index * bs
                filled = min(max(seq.num_tokens - base, 0), bs)
                reach = min(max(final - base, 0), bs)
                seen = blocks.setdefault(block, [filled, reach])
                seen[0], seen[1] = max(seen[0], filled), max(seen[1], reach)
        token = reserved = internal = 0
        for filled, reach in blocks.values():
            token += filled
            r, i = _empty_split(filled, reach, bs)
            reserved += r
            internal += i
        return len(blocks), token, reserved, internal

    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        used, token, reserved, internal = self._split(final_lens)
        free = (self.num_blocks - used) * self.block_size
        if not self.enable_caching:
            return MemoryUsage(token, reserved, internal, free)
        cached = len(self.cached_blocks()) * self.block_size
        return MemoryUsage(token, reserved, internal, free - cached, cached)

    def stats(self) -> dict[str, float | int | None]:
        used, token, _, _ = self._split(None)
        caching = self.enable_caching
        vllm = self._manager.prefix_cache_stats
        return {
            **{key: value if caching else None for key, value in self._lookups.stats().items()},
            **{f"vllm_{key}": getattr(vllm, key) if caching else None
               for key in ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")},
            "cached_free_blocks": len(self.cached_blocks()) if caching else None,
            "evictions": self._evictions if caching else None,
            "logical_slots": sum(seq.num_tokens for seq in self._seqs.values()),
            "physical_slots": token,
            "allocated_slots": used * self.block_size,
            "live_sequences": len(self._seqs),
            "copy_ops": self._num_copy_ops,
            "copied_slots": self._copied_slots,
        }

    def check_invariants(self) -> None:
        refs: dict[int, int] = {}
        for seq_id, seq in self._seqs.items():
            table = self._vllm_blocks(seq_id)
            want = ceil_div(max(seq.num_tokens, seq.prompt_len), self.block_size)
            assert len(table) == want, f"seq {seq_id}: {len(table)} blocks, expected {want}"
            assert 0 not in table, f"seq {seq_id}: holds vLLM's null block"
            assert seq.request.num_computed_tokens == seq.num_tokens, f"seq {seq_id}: computed counts disagree"
            for b in table:
                refs[b] = refs.get(b, 0) + 1
        for b, count in refs.items():
            assert self._pool.blocks[b].ref_cnt == count, f"block {b - 1}: vLLM ref {self._pool.blocks[b].ref_cnt}, {count} owners"
        free = self.free_blocks()
        assert len(set(free)) == len(free), "a block is twice in vLLM's free queue"
        assert len(free) + len(refs) == self.num_blocks, "free + used != num_blocks"
        assert not set(b - 1 for b in refs) & set(free), "a held block is in the free queue"
