"""Regions held for parallel samples on allocators whose forks cannot share blocks.

A system without shared blocks (Orca, TGI's ``best_of``, static servers) runs a request's n
samples as n independent sequences from the moment it admits the request: it reserves all n
regions at once, or admits nothing. The scheduler forks the samples only after the prompt's
prefill, so on a region allocator (``forks_share_blocks`` False) it takes, at admission, one
placeholder region per sample still to come (an ``admit`` of the prompt under a fresh sequence
id, sized as the fork will be), and gives one back right before each fork takes its region.
Paged strategies need none: their forks share the prompt's blocks.

A held region is booked like the sample that will fill it (its final length is the group's):
``final_lens()`` hands those lengths to ``Allocator.usage``.
"""
from __future__ import annotations

from collections.abc import Callable

from allocators.base import Allocator
from kvbench.engine.sequence import Group


class SampleHolds:
    def __init__(self, allocator: Allocator, new_seq_id: Callable[[], int]) -> None:
        self.allocator = allocator
        self.new_seq_id = new_seq_id
        self.enabled = not getattr(allocator, "forks_share_blocks", True)
        self._held: dict[int, list[tuple[int, int]]] = {}  # request_id -> (hold seq_id, final_len)

    def needed(self, group: Group, pending_forks: int) -> int:
        """Regions the group's samples still need beyond those it holds or runs now."""
        if not self.enabled or group.is_beam or group.request.n <= 1:
            return 0
        to_come = pending_forks if group.forked else group.request.n - 1
        return max(0, to_come - len(self._held.get(group.request_id, ())))

    def take(self, group: Group, count: int, max_len: int) -> bool:
        """Hold ``count`` more regions for the group, all or none."""
        prompt = group.request.prompt_ids
        taken = []
        for _ in range(count):
            seq_id = self.new_seq_id()
            if not self.allocator.admit(seq_id, prompt, max_len, group.kv_final_len).ok:
                for held in taken:
                    self.allocator.free(held)
                return False
            taken.append(seq_id)
        if taken:
            self._held.setdefault(group.request_id, []).extend((s, group.kv_final_len) for s in taken)
        return True

    def release_one(self, group: Group) -> None:
        """Give one held region back (a fork is about to take its own)."""
        held = self._held.get(group.request_id)
        if held:
            self.allocator.free(held.pop()[0])
            if not held:
                del self._held[group.request_id]

    def release_all(self, group: Group) -> None:
        for seq_id, _ in self._held.pop(group.request_id, ()):
            self.allocator.free(seq_id)

    def final_lens(self) -> dict[int, int]:
        return {seq_id: final for held in self._held.values() for seq_id, final in held}
