"""Per-request priorities for the ``priority`` queue order and the ``lowest_priority`` victim.

Two sources, both optional knobs of every workload (absent from the workload files, so give
them with ``+workload.<knob>=`` or in an experiment file):

- ``priority_shares``: class shares, e.g. ``[0.2, 0.8]``: each request is class k (0 = most
  urgent) with probability shares[k], drawn on a stream of its own (``rng_for(seed,
  "priority")``), so the prompts, lengths and arrivals stay those of the run without it;
- ``priority_field`` (replayed CSV traces): the integer column of the trace that holds it; a
  column the trace lacks is an error naming the columns it has.

A conversation's later turns keep the priority of its first.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .common import WorkloadError, rng_for

PRIORITY_KNOBS = ("priority_shares",)  # taken by every workload, read here
MAX_CLASSES = 64


def parse_shares(value: Any) -> list[float] | None:
    """The class shares, checked: a list of 1 to MAX_CLASSES numbers >= 0 summing to 1."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_CLASSES:
        raise WorkloadError(f"workload.priority_shares must be a list of 1 to {MAX_CLASSES} class shares; got {value!r}")
    shares = []
    for share in value:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or share < 0:
            raise WorkloadError(f"workload.priority_shares must hold numbers >= 0; got {value!r}")
        shares.append(float(share))
    if not math.isclose(sum(shares), 1.0, rel_tol=0, abs_tol=1e-6):
        raise WorkloadError(f"workload.priority_shares must sum to 1; got {value!r} (sum {sum(shares):g})")
    return shares


def draw_classes(shares: list[float], count: int, seed: int) -> list[int]:
    """``count`` class indices drawn with these shares, on the workload's ``priority`` stream."""
    return [int(k) for k in rng_for(seed, "priority").choice(len(shares), size=count, p=np.asarray(shares))]


def priority_column(values: np.ndarray, field: str, name: str) -> list[int]:
    """A trace's priority column as integers; a value that is not a whole number is an error."""
    if values.size and not np.all(np.isfinite(values) & (values == np.round(values))):
        raise WorkloadError(f"workload.priority_field: column {field!r} of {name} must hold whole numbers")
    return [int(v) for v in values]
