"""Preemption victims: which running group gives its memory back when the allocator is out of
memory, chosen by ``engine.preemption_victim``. One class per choice; the scheduler only asks
``choose``.

The scheduler offers every running group, in arrival order: the one that ran out of memory
(the grower), those scheduled before it in this step (the scheduler takes their chunks of the
step back before it preempts one, as vLLM v1 does) and those not reached yet. Every choice
breaks ties towards the newest arrival, so ``newest`` is the last running group, as it always
was.

    newest           the most recently arrived (vLLM's default; kvbench's only choice before).
    lowest_priority  the largest priority value (least urgent), then the newest.
    least_computed   the fewest computed tokens (what recompute throws away), then the newest.
    most_blocks      the most distinct blocks in its tables (what preempting it frees: a block
                     its samples share counts once; a prefix block cached for another request
                     counts for both), then the newest.

When the grower ranks last it is its own victim, as in vLLM v1 (``least_computed``: that loses
the fewest tokens, the point of the choice). ``most_blocks`` (``unreached_first``) first takes
the biggest of the groups the step has not reached yet, and chooses among all (itself and those
already scheduled) only when none is left, as vLLM v0 takes victims from the running queue
before the group itself. The grower holds the most blocks as it grows (a group whose samples
diverge, one that just came back), so choosing among all first made it free its own blocks each
time it came back and gain no token, until it ran alone in a restored state that may need more
blocks than the pool (a request that fits alone, rejected); a group coming back keeps its
arrival order, so an old one is reached before the newer ones it now preempts.
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from allocators.base import Allocator
from kvbench.engine.sequence import Group


def _newest_key(group: Group) -> tuple:
    return group.age_key


_AGE = attrgetter("age_key")  # _newest_key, in C


class VictimChoice:
    name = "newest"
    unreached_first = False  # True: groups not reached yet in this step go before the others

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator

    def choose(self, grower: Group, running: Sequence[Group]) -> Group:
        """The group to preempt when ``grower`` (one of ``running``, in the step's order) is out
        of memory."""
        if self.unreached_first:
            unreached = running[running.index(grower) + 1:]
            if unreached:
                return self.pick(unreached)
        return self.pick(running)

    def pick(self, candidates: Sequence[Group]) -> Group:
        """The group to preempt among ``candidates`` (not empty)."""
        return max(candidates, key=_newest_key)


class NewestVictim(VictimChoice):
    name = "newest"

    def pick(self, candidates: Sequence[Group]) -> Group:
        return max(candidates, key=_AGE)


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
    unreached_first = True

    def blocks_of(self, group: Group) -> int:
        """Distinct blocks in the group's tables: its samples' shared blocks count once."""
        table = self.allocator.block_table
        return len({b for s in group.seqs for b in table(s.seq_id)})

    def pick(self, candidates: Sequence[Group]) -> Group:
        return max(candidates, key=lambda g: (self.blocks_of(g), *_newest_key(g)))


VICTIMS: dict[str, type[VictimChoice]] = {cls.name: cls for cls in (
    NewestVictim, LowestPriorityVictim, LeastComputedVictim, MostBlocksVictim)}


def make_victim_choice(name: str, allocator: Allocator) -> VictimChoice:
    """The choice ``engine.preemption_victim`` names."""
    if name not in VICTIMS:
        raise ValueError(f"engine.preemption_victim must be one of {', '.join(VICTIMS)}; got {name!r}")
    return VICTIMS[name](allocator)
