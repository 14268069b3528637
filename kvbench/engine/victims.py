"""Preemption victims: which running group gives its memory back when the allocator is out of
memory, chosen by ``engine.preemption_victim``. One class per choice; the scheduler only asks
``pick``.

The scheduler offers every running group, in arrival order: the one that ran out of memory,
those scheduled before it in this step (the scheduler takes their chunks of the step back
before it preempts one, as vLLM v1 does) and those not reached yet. Every choice breaks ties
towards the newest arrival, so ``newest`` is the last running group, as it always was.

    newest           the most recently arrived (vLLM's default; kvbench's only choice before).
    lowest_priority  the largest priority value (least urgent), then the newest.
    least_computed   the fewest computed tokens (what recompute throws away), then the newest.
    most_blocks      the most blocks in its tables (what preempting it frees; a block shared by
                     two sequences of the group counts twice), then the newest.
"""
from __future__ import annotations

from collections.abc import Sequence

from allocators.base import Allocator
from kvbench.engine.sequence import Group


def _newest_key(group: Group) -> tuple:
    return (group.request.arrival_s, group.request_id)


class VictimChoice:
    name = "newest"

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator

    def pick(self, candidates: Sequence[Group]) -> Group:
        """The group to preempt among ``candidates`` (not empty)."""
        return max(candidates, key=_newest_key)


class NewestVictim(VictimChoice):
    name = "newest"


class LowestPriorityVictim(VictimChoice):
    name = "lowest_priority"

    def pick(self, candidates: Sequence[Group]) -> Group:
        return max(candidates, key=lambda g: (g.request.priority or 0, *_newest_key(g)))


class LeastComputedVictim(VictimChoice):
    name = "least_computed"

    def pick(self, candidates: Sequence[Group]) -> Group:
        return max(candidates, key=lambda g: (-sum(s.num_computed for s in g.seqs), *_newest_key(g)))


class MostBlocksVictim(VictimChoice):
    name = "most_blocks"

    def pick(self, candidates: Sequence[Group]) -> Group:
        table = self.allocator.block_table
        return max(candidates, key=lambda g: (sum(len(table(s.seq_id)) for s in g.seqs), *_newest_key(g)))


VICTIMS: dict[str, type[VictimChoice]] = {cls.name: cls for cls in (
    NewestVictim, LowestPriorityVictim, LeastComputedVictim, MostBlocksVictim)}


def make_victim_choice(name: str, allocator: Allocator) -> VictimChoice:
    """The choice ``engine.preemption_victim`` names."""
    if name not in VICTIMS:
        raise ValueError(f"engine.preemption_victim must be one of {', '.join(VICTIMS)}; got {name!r}")
    return VICTIMS[name](allocator)
