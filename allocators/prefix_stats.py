"""Prefix-cache lookup counters, first admissions and re-admissions of preempted sequences apart.

Counted as vLLM v1 counts them (vLLM 0.33.0): the local lookup of ``KVCacheManager.get_computed_blocks``
is recorded at admission by ``KVCacheManager.record_prefix_cache_stats``
(vllm/v1/core/kv_cache_manager.py) with ``preempted=request.num_preemptions > 0``, and
``PrefixCacheStats.record`` (vllm/v1/metrics/stats.py) adds a preempted request's lookup to
``preempted_requests``, ``preempted_queries`` and ``preempted_hits`` instead of ``requests``,
``queries`` and ``hits``; the connector's (offloading tiers') stats are split the same way
(``Scheduler.schedule``, vllm/v1/core/sched/scheduler.py).
A sequence preempted (by recompute or swap) comes back through admission and hits its own
blocks; counted with the first admissions, those hits would lift the hit rate above what the
stream's reuse allows (``trace_reuse_ceiling``).

Units: ``queries`` and ``hits`` are the allocator's, blocks (paged_prefix, radix) or tokens (the
grouped prefix caches), as ``prefix_queries`` / ``prefix_hits`` and ``prefix_hit_rate`` report
them; ``query_tokens`` (prompt tokens bar the last, the most a prompt can hit) and ``hit_tokens``
are tokens, as ``prefix_token_hit_rate`` and ``preempted_queries`` / ``preempted_hits`` (vLLM's
unit) report them. Only admits that succeed are recorded (kvbench's rule:
a refused admit changes nothing).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class LookupCounts:
    """The lookups of one kind of admission: how many, what they asked, what they found."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0

    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None

    def token_hit_rate(self) -> float | None:
        return self.hit_tokens / self.query_tokens if self.query_tokens else None


@dataclass(slots=True)
class PrefixLookups:
    """First admissions and re-admissions of preempted sequences, counted apart."""

    first: LookupCounts = field(default_factory=LookupCounts)
    preempted: LookupCounts = field(default_factory=LookupCounts)
    preempted_ids: set[int] = field(default_factory=set)  # sequences preempted at least once

    def note_preempted(self, seq_id: int) -> None:
        self.preempted_ids.add(seq_id)

    def counts_for(self, seq_id: int) -> LookupCounts:
        """Where an admission of ``seq_id`` is counted (vLLM: ``request.num_preemptions > 0``)."""
        return self.preempted if seq_id in self.preempted_ids else self.first

    def record(self, seq_id: int, *, queries: int, hits: int, query_tokens: int, hit_tokens: int) -> None:
        counts = self.counts_for(seq_id)
        counts.requests += 1
        counts.queries += queries
        counts.hits += hits
        counts.query_tokens += query_tokens
        counts.hit_tokens += hit_tokens

    def stats(self) -> dict[str, float | int | None]:
        """``prefix_*`` over first admissions, ``preempted_*`` over re-admissions."""
        first, again = self.first, self.preempted
        return {
            "prefix_requests": first.requests, "prefix_queries": first.queries, "prefix_hits": first.hits,
            "prefix_hit_rate": first.hit_rate(),
            # cached tokens over prompt tokens (bar the last): comparable across block sizes
            "prefix_token_hit_rate": first.token_hit_rate(),
            # vLLM's unit: tokens (prompt tokens bar the last, and those hit), whatever the allocator's
            "preempted_requests": again.requests, "preempted_queries": again.query_tokens,
            "preempted_hits": again.hit_tokens,
            "preempted_prefix_hit_rate": again.hit_rate(),
            "preempted_prefix_token_hit_rate": again.token_hit_rate(),
        }
