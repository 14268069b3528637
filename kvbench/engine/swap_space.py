"""Where swap preemption puts a preempted group's K/V: a host pool of its own, or the host tier.

``SwapSpace`` is the pool of ``engine.swap_space_bytes`` (in slots), as before tiers existed.
With ``offload`` on, ``HostTierSwap`` books the same K/V in the host tier of the run's
``allocators.tiers.TierStack`` (one pool, one accounting): a swap-out evicts cached chunks to
make room and fails only when pinned K/V fill the tier.
"""
from __future__ import annotations

from allocators.tiers import TierStack


class SwapSpace:
    """A host pool of ``capacity_slots`` token slots, used by nothing but swap preemption."""

    def __init__(self, capacity_slots: int) -> None:
        self.capacity_slots = capacity_slots
        self.used_slots = 0

    def take(self, slots: int) -> bool:
        """Hold ``slots`` of swapped-out K/V; False (nothing changed) when they do not fit."""
        if self.used_slots + slots > self.capacity_slots:
            return False
        self.used_slots += slots
        return True

    def give(self, slots: int) -> None:
        self.used_slots -= slots


class HostTierSwap(SwapSpace):
    """Swapped-out K/V held in the host tier, ``slot_bytes`` per slot, beside its cached chunks."""

    def __init__(self, tiers: TierStack, slot_bytes: int) -> None:
        super().__init__(tiers.host.capacity_bytes // slot_bytes)
        self.tiers = tiers
        self.slot_bytes = slot_bytes

    def take(self, slots: int) -> bool:
        if not self.tiers.pin_swap(slots * self.slot_bytes):
            return False
        self.used_slots += slots
        return True

    def give(self, slots: int) -> None:
        self.tiers.unpin_swap(slots * self.slot_bytes)
        self.used_slots -= slots
