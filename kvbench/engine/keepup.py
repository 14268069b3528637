"""Whether a run kept up with its offered load, from its requests table.

Two summary columns, both null where the table cannot say:

- ``served_frac``: requests finished over requests offered, over the arrival span [t0, T] (first
  to last arrival) shifted by a lag d: finishes in [t0 + d, T] against arrivals in [t0, T - d],
  with d the 90th percentile of end-to-end latency; null when d exceeds half the span (a
  trace too short for its latencies: most slow requests would fall outside). A plain
  finished / duration would count the drain after the last arrival against a short trace; an
  unshifted window would count the start-up, when nothing can finish yet. A system that keeps
  up finishes requests at the rate they arrive, d later, so the ratio is about 1 (low by the
  share of requests slower than d that cross the window's end, a few % on a 100 s ShareGPT
  trace); a saturated one finishes at its service rate, so the ratio is service / offered rate.
- ``ttft_growth``: the least-squares slope of TTFT against arrival time, over finished requests
  (seconds of added wait per second of trace). A stable queue gives about 0; a queue that grows
  by a fraction f of the arrivals gives about f.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

LAG_QUANTILE = 0.9  # of end-to-end latency: the shift between the arrival and finish windows


def served_frac(requests: pd.DataFrame) -> float | None:
    """Finished in [t0 + d, T] over arrived in [t0, T - d] (None without a finished request)."""
    if not len(requests):
        return None
    finish = requests["finish_s"].to_numpy(dtype=float)
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    finished = (requests["status"] == "finished").to_numpy() & ~np.isnan(finish)
    if not finished.any():
        return 0.0
    first, last = float(arrival.min()), float(arrival.max())
    span = last - first
    if span <= 0:
        return None
    lag = float(np.quantile(finish[finished] - arrival[finished], LAG_QUANTILE))
    if lag > span / 2:  # latencies as long as the trace: too short a trace to count on
        return None
    arrived = int(((arrival >= first) & (arrival <= last - lag)).sum())
    done = int((finished & (finish >= first + lag) & (finish <= last)).sum())
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
