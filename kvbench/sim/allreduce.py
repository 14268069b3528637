"""Measured NCCL all-reduce times inside one node, interpolated by message size and workers.

Tables: ``kvbench/sim/data/vidur/all_reduce_<interconnect>.csv.gz`` (Vidur's NCCL profiling,
kineto kernel times, median of repeats; ``size`` in bytes). A GPU profile names its table with
``allreduce_table`` (e.g. ``a100_dgx``); rows with ``devices_per_node == num_workers`` are the
single-node runs. Small messages are noisy (a 2 KiB all-reduce on 8 A100s reads 62 us, a 1 MB
one 37 us), so the table is made monotone: each size's time is the least time measured at that
size or any larger one. Between two sizes the time is linear in size; above the largest it
scales with size at the largest's bandwidth; below the smallest it is the smallest's time (the
latency floor). Worker counts the table lacks fall back to the cost
model's latency + ring formula.
"""
from __future__ import annotations

import csv
import gzip
from bisect import bisect_left
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).with_name("data") / "vidur"


def available() -> list[str]:
    return sorted(p.name[len("all_reduce_"):-len(".csv.gz")] for p in DATA_DIR.glob("all_reduce_*.csv.gz"))


def load_raw(name: str) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
    """workers -> (sizes in bytes, median seconds) as measured, sorted by size, single node."""
    path = DATA_DIR / f"all_reduce_{name}.csv.gz"
    if not path.is_file():
        raise ValueError(f"gpu.allreduce_table must be one of {available()}, got {name!r}")
    by_workers: dict[int, dict[float, float]] = {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if row["devices_per_node"] != row["num_workers"]:
                continue
            by_workers.setdefault(int(row["num_workers"]), {})[float(row["size"])] = (
                float(row["time_stats.all_reduce.median"]) * 1e-3)
    return {w: (tuple(sorted(t)), tuple(t[s] for s in sorted(t))) for w, t in by_workers.items()}


def monotone(sizes: tuple[float, ...], times: tuple[float, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each size's time replaced by the least time at that size or any larger one."""
    out, least = [], float("inf")
    for t in reversed(times):
        least = min(least, t)
        out.append(least)
    return sizes, tuple(reversed(out))


@lru_cache(maxsize=None)
def load(name: str) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
    """workers -> the monotone (sizes, seconds) the cost model interpolates."""
    return {w: monotone(*table) for w, table in load_raw(name).items()}


def interpolate(sizes: tuple[float, ...], times: tuple[float, ...], size: float) -> float:
    """Seconds for ``size`` bytes from a sorted table (see the module docstring)."""
    if size <= sizes[0]:
        return times[0]
    if size >= sizes[-1]:
        return times[-1] * size / sizes[-1]
    i = bisect_left(sizes, size)
    s0, s1, t0, t1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
    return t0 + (t1 - t0) * (size - s0) / (s1 - s0)


def table_for(name: str | None, workers: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The measured (sizes, seconds) for ``workers`` GPUs, or None where there is none."""
    if not name or workers < 2:
        return None
    return load(name).get(workers)
