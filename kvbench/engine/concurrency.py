"""``workload.max_concurrency``: at most N requests in flight, as ``vllm bench serve --max-concurrency``.

Requests keep their order. One whose arrival time has come while N requests are in flight
waits for a free slot; it is sent when one finishes, and its latencies (TTFT, E2EL) count from
that moment, as the benchmark client's do (its ``arrival_s`` becomes the send time). In flight
means admitted and not yet finished or rejected: waiting, running or swapped out.
"""
from __future__ import annotations

import dataclasses

from kvbench.requests import Request


class ConcurrencyGate:
    """Admits arrivals while fewer than ``limit`` requests are in flight (``None``: no limit)."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"max_concurrency must be at least 1; got {limit}")
        self.limit = limit
        self._full = False
        self._opened_s = 0.0  # when the gate last went from full to having room

    def has_room(self, in_flight: int, now: float) -> bool:
        """Whether one more request may be sent at ``now``; call it at every step boundary."""
        if self.limit is None:
            return True
        room = in_flight < self.limit
        if room and self._full:
            self._opened_s = now
        self._full = not room
        return room

    def send(self, request: Request) -> Request:
        """The request as sent: held back by a full gate, it leaves when the gate opened."""
        if self.limit is None or request.arrival_s >= self._opened_s:
            return request
        return dataclasses.replace(request, arrival_s=self._opened_s)
