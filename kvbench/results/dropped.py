"""Selected runs an analysis leaves out, counted by reason and said on stderr, one line per reason.

``kvbench-plot``, ``kvbench-report`` and ``kvbench-results --compare`` select runs, then draw or
average only those whose values can be drawn or averaged: a null metric (not applicable), a value
that is not finite (a request rate of inf on the x axis), a value <= 0 on a log axis. Each such run
is noted here under its reason (a run counts once per reason), and the tool prints
``<tool>: N of M selected runs not drawn: <reason>`` for each reason, never dropping one silently.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Hashable, Iterable

import pandas as pd

from kvbench.results.naming import cell


class Dropped:
    """The runs (by their index label) left out, per reason, in order of first appearance, of
    ``total`` selected runs."""

    def __init__(self, total: int = 0) -> None:
        self.total = total
        self.reasons: dict[str, set[Hashable]] = {}

    def add(self, reason: str, runs: Iterable[Hashable]) -> None:
        labels = set(runs)
        if labels:
            self.reasons.setdefault(reason, set()).update(labels)

    def __bool__(self) -> bool:
        return bool(self.reasons)

    def lines(self, verb: str = "drawn") -> list[str]:
        """``N of M selected runs not <verb>: <reason>``, one per reason."""
        return [f"{len(runs)} of {self.total} selected run{'s' if self.total != 1 else ''} not {verb}: {reason}"
                for reason, runs in self.reasons.items()]

    def say(self, prog: str, verb: str = "drawn", prefix: str = "") -> None:
        """Each line on stderr as ``<prog>: <prefix><line>``."""
        for line in self.lines(verb):
            print(f"{prog}: {prefix}{line}", file=sys.stderr)


def usable(runs: pd.DataFrame, column: str, dropped: Dropped | None, log: bool = False, axis: str = "") -> pd.Series:
    """Which runs hold a finite number in ``column`` (and > 0 with ``log``); the others are noted in
    ``dropped`` under ``column is null (not applicable)``, ``column is inf (not finite)`` or ``column
    is <= 0 (a log axis cannot draw it)``. ``axis`` names where the column goes (``on the x axis``)."""
    values = pd.to_numeric(runs[column], errors="coerce")
    null = values.isna()
    finite = values.map(lambda v: not pd.isna(v) and math.isfinite(v)).astype(bool)
    positive = finite & (values > 0) if log else finite
    where = f" {axis}" if axis else ""
    if dropped is not None:
        dropped.add(f"{column} is null (not applicable){where}", runs.index[null])
        for value in dict.fromkeys(values[~null & ~finite]):
            dropped.add(f"{column} is {cell(value)} (not finite){where}", runs.index[~null & (values == value)])
        dropped.add(f"{column} is <= 0 (a log axis cannot draw it){where}", runs.index[finite & ~positive])
    return positive & ~null
