"""Queue orders: which waiting (or swapped) group the scheduler tries first, chosen by
``engine.policy``. One class per order; the scheduler only asks ``arrange``.

    fcfs      first come, first served: the queue stays as the scheduler built it (arrivals at
              the back; a group preempted by recompute back at the front). Never reordered.
    priority  the request's priority first (lower value = more urgent, as vLLM), then arrival.
    sjf       shortest remaining output first: the true output length (``engine.sjf_error`` 0)
              or a noisy prediction of it, ``true * exp(error * z)`` with one standard normal z
              per request (seeded by ``seed`` and the request id, so every run sees the same).
    lpm       longest cached prefix first (SGLang's ``lpm``): the tokens of the group's first
              sequence the allocator's prefix cache holds now; 0 everywhere without a cache.

Every order but fcfs honours an aging bound (``engine.max_wait_s``): a group that has waited
longer than it, counted from ``Group.order_s``, goes before all others, oldest first. Ties
break by ``order_s`` then request id, so a sort is deterministic.
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterable

from allocators.base import Allocator
from kvbench.engine.sequence import Group


class QueueOrder:
    """fcfs: the queue as built; subclasses give a sort key and get aging for free."""

    name = "fcfs"
    reorders = False

    def __init__(self, max_wait_s: float | None = None) -> None:
        self.max_wait_s = max_wait_s

    def key(self, group: Group) -> tuple:
        """Smaller goes first (after the groups past the aging bound)."""
        return ()

    def arrange(self, groups: Iterable[Group], now: float) -> list[Group]:
        """The groups in the order the scheduler should try them at time ``now``."""
        bound = self.max_wait_s

        def full_key(group: Group) -> tuple:
            if bound is not None and now - group.order_s > bound:
                return (0, group.order_s, group.request_id)
            return (1, *self.key(group), group.order_s, group.request_id)

        return sorted(groups, key=full_key)


class FcfsOrder(QueueOrder):
    name = "fcfs"


class PriorityOrder(QueueOrder):
    name = "priority"
    reorders = True

    def key(self, group: Group) -> tuple:
        priority = group.request.priority
        return (0 if priority is None else priority,)


class ShortestJobOrder(QueueOrder):
    name = "sjf"
    reorders = True

    def __init__(self, max_wait_s: float | None = None, error: float = 0.0, seed: int = 0) -> None:
        super().__init__(max_wait_s)
        self.error = error
        self.seed = seed
        self._predicted: dict[int, float] = {}

    def predicted_output(self, group: Group) -> float:
        """The output length the scheduler believes the request has (its true one at error 0)."""
        rid = group.request_id
        value = self._predicted.get(rid)
        if value is None:
            true = float(group.output_len)
            if self.error:
                z = random.Random(f"sjf:{self.seed}:{rid}").gauss(0.0, 1.0)
                true *= math.exp(self.error * z)
            value = self._predicted[rid] = true
        return value

    def key(self, group: Group) -> tuple:
        generated = max((s.num_generated for s in group.seqs), default=0)
        return (max(self.predicted_output(group) - generated, 0.0),)


class LongestPrefixOrder(QueueOrder):
    name = "lpm"
    reorders = True

    def __init__(self, allocator: Allocator, max_wait_s: float | None = None) -> None:
        super().__init__(max_wait_s)
        self.allocator = allocator

    def key(self, group: Group) -> tuple:
        return (-self.allocator.cached_prefix_len(group.seqs[0].tokens),)


POLICIES = ("fcfs", "priority", "sjf", "lpm")


def make_queue_order(policy: str, allocator: Allocator, *, max_wait_s: float | None = None,
                     sjf_error: float = 0.0, seed: int = 0) -> QueueOrder:
    """The order ``engine.policy`` names."""
    if policy == "fcfs":
        return FcfsOrder(max_wait_s)
    if policy == "priority":
        return PriorityOrder(max_wait_s)
    if policy == "sjf":
        return ShortestJobOrder(max_wait_s, sjf_error, seed)
    if policy == "lpm":
        return LongestPrefixOrder(allocator, max_wait_s)
    raise ValueError(f"engine.policy must be one of {', '.join(POLICIES)}; got {policy!r}")
