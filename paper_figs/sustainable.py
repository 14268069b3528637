"""The sustainable-rate rule of the headline's rate rows, and the bisection that finds its knee.

A swept rate is *sustainable* when all three hold (seeds averaged per rate):

- latency: normalized latency at most ``LATENCY_FACTOR`` times the lowest swept rate's (the
  PagedAttention paper's reading of its Figure 12: the rate before latency explodes);
- served: ``served_frac`` (finished / offered over the arrival span, ``kvbench.engine.keepup``) at
  least ``SERVED_MIN`` less twice its sampling noise (2 / sqrt(requests): on a 100-request trace
  a count ratio is not known to 5%): the system finishes what is offered; skipped where
  ``served_frac`` is null (latencies longer than half the trace: a short ShareGPT trace);
- no growing queue: ``ttft_growth`` (least-squares slope of TTFT against arrival time) at most
  ``TTFT_GROWTH_MAX`` seconds of added wait per second of trace.

Walking up the rates, the sustained rate is the last sustainable one before the first that is
not; nothing after that first failure counts. A system whose lowest swept rate already fails
sustains "below" that rate (``Sustained.below``), never the lowest rate itself.

Runs that predate the keep-up columns have no ``served_frac`` / ``ttft_growth``; for them the
queue test reads the mean TTFT instead (a queue growing at slope g over a trace of T seconds has
a mean TTFT of about g T / 2, so ``2 * mean_ttft_s / T`` estimates g) and the served test is
skipped; ``Sustained.proxy`` says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

LATENCY_FACTOR = 2.0
SERVED_MIN = 0.95
TTFT_GROWTH_MAX = 0.02  # s of added wait per s of trace: a queue that grows by 2% of arrivals
SLO_P99_TTFT_S = 2.0  # the stated SLO of the second rate column: P99 TTFT at most 2 s


@dataclass(frozen=True)
class Sustained:
    """``rate``: the last sustainable rate (NaN when none); ``below``: the lowest tried rate when
    even it fails; ``ceiling``: True when the highest tried rate still passes (at least);
    ``proxy``: the keep-up test used the mean-TTFT proxy (runs without keep-up columns)."""

    rate: float
    below: float | None = None
    ceiling: bool = False
    proxy: bool = False

    def text(self) -> str:
        if self.below is not None:
            return f"< {self.below:g}"
        return f">= {self.rate:g}" if self.ceiling else f"{self.rate:g}"


def point_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per swept rate (seeds averaged): latency, keep-up measures and the verdict of each test."""
    cols = ["normalized_latency_s"]
    has_keepup = "served_frac" in runs and runs["served_frac"].notna().any()
    cols += ["served_frac", "ttft_growth", "num_requests"] if has_keepup else ["mean_ttft_s", "num_requests"]
    cols += [c for c in ("p99_ttft_s",) if c in runs]
    present = [c for c in cols if c in runs]
    per = runs.groupby("request_rate")[present].mean(numeric_only=True).sort_index()
    base = float(per["normalized_latency_s"].iloc[0])
    per["latency_ok"] = per["normalized_latency_s"] <= LATENCY_FACTOR * base  # NaN -> False
    if has_keepup:
        noise = 2 / per["num_requests"].clip(lower=1) ** 0.5 if "num_requests" in per else 0.0
        # null served_frac: the trace is too short for its latencies; the queue test still applies
        per["served_ok"] = per["served_frac"].isna() | (per["served_frac"] >= SERVED_MIN - noise)
        per["queue_ok"] = per["ttft_growth"] <= TTFT_GROWTH_MAX
    else:
        per["served_ok"] = True
        if {"mean_ttft_s", "num_requests"} <= set(per.columns):
            span = per["num_requests"] / per.index.to_series()
            per["queue_ok"] = 2 * per["mean_ttft_s"] / span <= TTFT_GROWTH_MAX
        else:
            per["queue_ok"] = True
    per["sustainable"] = per["latency_ok"] & per["served_ok"] & per["queue_ok"]
    per.attrs["proxy"] = not has_keepup
    return per


def sustained(runs: pd.DataFrame) -> Sustained:
    """The rule above over the swept rates of one system."""
    per = point_table(runs)
    proxy = bool(per.attrs.get("proxy"))
    rates = list(per.index)
    if not bool(per["sustainable"].iloc[0]):
        return Sustained(math.nan, below=float(rates[0]), proxy=proxy)
    last = float(rates[0])
    for rate, ok in per["sustainable"].items():
        if not ok:
            return Sustained(last, proxy=proxy)
        last = float(rate)
    return Sustained(last, ceiling=True, proxy=proxy)


def slo_rate(runs: pd.DataFrame, p99_ttft_s: float = SLO_P99_TTFT_S) -> Sustained:
    """The last rate, walking up, whose P99 TTFT is within the SLO (``below`` when none)."""
    per = runs.groupby("request_rate")["p99_ttft_s"].mean().sort_index()
    ok = per <= p99_ttft_s
    if not bool(ok.iloc[0]):
        return Sustained(math.nan, below=float(per.index[0]))
    last = float(per.index[0])
    for rate, good in ok.items():
        if not good:
            return Sustained(last)
        last = float(rate)
    return Sustained(last, ceiling=True)


def tolerance(rate: float) -> float:
    """Bisection stops when the bracket is at most 1 req/s or 5% of its lower end, whichever is finer."""
    return min(1.0, 0.05 * rate)


def bisect_knee(passes, low: float, high: float) -> tuple[float, float, int]:
    """Narrow [low, high] (``passes(low)`` True, ``passes(high)`` False) to the tolerance;
    ``passes(rate)`` runs or looks up that rate. Returns (low, high, rates tried)."""
    tried = 0
    while high - low > tolerance(low):
        mid = round((low + high) / 2, 6)
        tried += 1
        if passes(mid):
            low = mid
        else:
            high = mid
    return low, high, tried


def ratio_text(top: Sustained, base: Sustained) -> str:
    """``top / base`` as the headline writes it: a lower bound where the base sustains only
    "below" its lowest rate or the top hit the sweep's ceiling, never a ratio of a saturated base."""
    if top.below is not None:
        if base.below is not None:
            return f"n/a (both saturated at the lowest rate: {top.text()} vs {base.text()} req/s)"
        return f"< {top.below / base.rate:.2f}x ({top.text()} vs {base.text()} req/s)"
    if base.below is not None:
        bound = top.rate / base.below
        if not bound > 1:
            return f"no ratio ({top.text()} vs {base.text()} req/s: the base saturates below the lowest swept rate)"
        return f"more than {bound:.2f}x ({top.text()} vs {base.text()} req/s)"
    if not base.rate > 0:
        return "n/a"
    prefix = ">= " if top.ceiling and not base.ceiling else ""
    return f"{prefix}{top.rate / base.rate:.2f}x ({top.text()} vs {base.text()} req/s)"
