"""Service-level objectives on a run's summary: ``p99_ttft_ms=2000,p99_tpot_ms=100,goodput=0.9``.

A latency bound holds when the run's value is at most the bound; ``goodput=F`` holds when at
least the fraction F of the finished requests met the per-request SLOs of ``metrics.goodput``
(``request_goodput / request_throughput``). A run that finished no request, or rejected one,
meets no SLO. Beside the SLO a run must keep up with its load: its ``served_frac``
(``kvbench.engine.keepup``) at least ``served_floor(num_requests)``; a null one (a trace shorter
than its latencies) or one of fewer than ``SERVED_MIN_REQUESTS`` requests is not judged. ``meets`` names the bound that decided a failure.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kvbench.cli import number

LATENCY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
SECONDS = ("mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s", "normalized_latency_s")
GOODPUT = "goodput"
# Run-to-run spread of served_frac where the system keeps up, times sqrt(requests). Measured on
# kvbench-capacity's README case (ShareGPT, OPT-13B on an A100-40GB: the config defaults; paged),
# one run per seed: 200 requests, seeds 0-9: sd 0.017 at 1 req/s, 0.038 at 2 req/s (x sqrt(200):
# 0.24, 0.53); 800 requests at 2 req/s, seeds 0-7: sd 0.0094 (x sqrt(800): 0.26). Pooled 0.37,
# taken as 0.4: count noise, shrinking as 1/sqrt(n). Means 0.993-1.003: no bias to allow for.
# The floor is 1 less two such sds (0.943 at 200 requests; a run that keeps up falls below it
# about 1 time in 40). The sustainable rule's 0.95 less 2/sqrt(n) (0.81 at 200 requests) is 3.3x
# wider than that noise.
SERVED_NOISE = 0.4
# Shorter traces are not judged: there the window's edges bias served_frac low, beyond its noise
# (20 requests on the tiny test case of tests/test_capacity.py, paged: 0.94 at 1 req/s, 0.71-0.86
# at 4-5 req/s with P99 TTFT 52 ms, null from 6 req/s).
SERVED_MIN_REQUESTS = 200


def served_floor(num_requests: int) -> float:
    """The least ``served_frac`` of a run that keeps up: 1 less twice its measured noise."""
    return 1.0 - 2.0 * SERVED_NOISE / math.sqrt(max(num_requests, 1))


class SLOError(ValueError):
    """A malformed or unknown SLO: one line."""


@dataclass(frozen=True)
class SLO:
    bounds: dict[str, float]  # metric -> upper bound (goodput: lower bound on the good fraction)

    def describe(self) -> str:
        return ", ".join(f"{m} >= {b:g}" if m == GOODPUT else f"{m} <= {b:g}" for m, b in self.bounds.items())


def _format_percentile(p: float) -> str:
    return f"{p:g}"


def parse_slo(text: str, percentiles: Sequence[float] = (90, 95, 99), goodput_set: bool = False) -> SLO:
    """``METRIC=BOUND,...``: a latency column of the summary (``p99_ttft_ms``, ``mean_e2el_ms``, one of
    the configured ``metrics.percentiles``, ``normalized_latency_s``) or ``goodput=FRACTION``."""
    bounds: dict[str, float] = {}
    allowed = f"METRIC=BOUND with METRIC one of {{mean,median,std,pP}}_{{ttft,tpot,itl,e2el}}_ms " \
              f"(P in metrics.percentiles: {', '.join(map(_format_percentile, percentiles))}), " \
              f"{', '.join(SECONDS)} or goodput"
    for item in [i.strip() for i in str(text).split(",") if i.strip()]:
        if "=" not in item:
            raise SLOError(f"--slo: {item!r} is not {allowed}")
        metric, raw = (s.strip() for s in item.split("=", 1))
        match = LATENCY.match(metric)
        if match and match.group(2) is not None and float(match.group(2)) not in [float(p) for p in percentiles]:
            raise SLOError(f"--slo: {metric} needs percentile {match.group(2)} in metrics.percentiles "
                           f"(now {', '.join(map(_format_percentile, percentiles))}); add it, e.g. "
                           f"metrics.percentiles=[{match.group(2)}]")
        if not match and metric not in SECONDS and metric != GOODPUT:
            raise SLOError(f"--slo: unknown metric {metric!r}; allowed: {allowed}")
        if metric in bounds:
            raise SLOError(f"--slo: {metric} given twice ({metric}={bounds[metric]:g} and {item}); give each bound once")
        try:
            bound = number(raw, unit_of(metric), above=0, at_most=1 if metric == GOODPUT else None)
        except ValueError as exc:
            raise SLOError(f"--slo: {metric} {exc}") from None
        if metric == GOODPUT:
            if not goodput_set:
                raise SLOError("--slo: goodput needs per-request SLOs in metrics.goodput "
                               "(e.g. metrics.goodput='ttft:2000 tpot:100')")
        bounds[metric] = bound
    if not bounds:
        raise SLOError(f"--slo: give at least one bound ({allowed})")
    return SLO(bounds)


def unit_of(metric: str) -> str:
    """The unit of an SLO metric's bound, for messages."""
    return "a fraction of the finished requests" if metric == GOODPUT else "s" if metric.endswith("_s") else "ms"


def measured(summary: Mapping[str, object], metric: str) -> float:
    """The run's value of an SLO metric (NaN where the run has none)."""
    if metric == GOODPUT:
        good, total = summary.get("request_goodput"), summary.get("request_throughput")
        if not isinstance(good, (int, float)) or not isinstance(total, (int, float)) or not total:
            return math.nan
        return float(good) / float(total)
    value = summary.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


class Verdict(NamedTuple):
    """A run against the SLO: ``ok``; ``detail``, what it measured (``p99_ttft_ms=812;
    served_frac=0.98 (floor 0.943)``); ``bound``, what decided a failure (``SLO``, ``served
    fraction``, both, or ``rejected or unfinished requests``), None when it holds."""
    ok: bool
    detail: str
    bound: str | None


def meets(summary: Mapping[str, object], slo: SLO) -> Verdict:
    """Whether the run meets every SLO bound and keeps up with its load (``served_floor``)."""
    values = {m: measured(summary, m) for m in slo.bounds}
    shown = ", ".join(f"{m}={v:.4g}" for m, v in values.items())
    if summary.get("num_rejected") or not summary.get("num_finished"):
        rejected, finished = summary.get("num_rejected") or 0, summary.get("num_finished") or 0
        return Verdict(False, f"{shown}; {rejected} rejected, {finished} finished", "rejected or unfinished requests")
    slo_ok = all(not math.isnan(v) and (v >= slo.bounds[m] if m == GOODPUT else v <= slo.bounds[m])
                 for m, v in values.items())
    served_ok, served = _served(summary)
    failed = [name for name, ok in (("SLO", slo_ok), ("served fraction", served_ok)) if not ok]
    return Verdict(not failed, f"{shown}; {served}", " and ".join(failed) or None)


def _served(summary: Mapping[str, object]) -> tuple[bool, str]:
    """Whether the run kept up (``served_frac`` at its floor; null: not judged), and the text."""
    value, requests = summary.get("served_frac"), summary.get("num_requests")
    if not isinstance(value, (int, float)) or not isinstance(requests, int) or math.isnan(value):
        return True, "served_frac null"
    if requests < SERVED_MIN_REQUESTS:
        return True, f"served_frac={value:.3g} (not judged under {SERVED_MIN_REQUESTS} requests)"
    floor = served_floor(requests)
    return value >= floor, f"served_frac={value:.3g} (floor {floor:.3g})"
