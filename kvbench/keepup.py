"""Whether a run kept up with its offered load, from its requests table.

Two summary columns, both null where the table cannot say:

- ``served_frac``: requests finished over requests arrived, both counted in one window, from the
  first finish to the last arrival. That window leaves out the start (nothing can finish yet)
  and the drain after the last arrival (finishes with no arrivals), which would bias a plain
  finished / duration against a short trace. A system that keeps up finishes requests at the
  rate they arrive, one latency later, so the ratio is about 1; a saturated one finishes at its
  service rate, so the ratio is service rate / offered rate.
- ``ttft_growth``: the least-squares slope of TTFT against arrival time, over finished requests
  (seconds of added wait per second of trace). A stable queue gives about 0; a queue that grows
  by a fraction f of the arrivals gives about f.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def served_frac(requests: pd.DataFrame) -> float | None:
    """Finished / arrived between the first finish and the last arrival (None if that window is empty)."""
    if not len(requests):
        return None
    finish = requests["finish_s"].to_numpy(dtype=float)
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    finished = (requests["status"] == "finished").to_numpy() & ~np.isnan(finish)
    if not finished.any():
        return 0.0
    start, end = float(finish[finished].min()), float(arrival.max())
    if end <= start:
        return None
    arrived = int(((arrival >= start) & (arrival <= end)).sum())
    done = int((finished & (finish >= start) & (finish <= end)).sum())
    return done / arrived if arrived else None


def ttft_growth(requests: pd.DataFrame) -> float | None:
    """Slope of TTFT (s) against arrival time (s) over finished requests; None under 3 of them."""
    if not len(requests):
        return None
    done = requests[(requests["status"] == "finished") & requests["ttft_s"].notna()]
    if len(done) < 3:
        return None
    x = done["arrival_s"].to_numpy(dtype=float)
    y = done["ttft_s"].to_numpy(dtype=float)
    spread = x - x.mean()
    denominator = float(np.dot(spread, spread))
    return float(np.dot(spread, y - y.mean()) / denominator) if denominator > 0 else None


def keep_up_columns(requests: pd.DataFrame) -> dict[str, float | None]:
    return {"served_frac": served_frac(requests), "ttft_growth": ttft_growth(requests)}
