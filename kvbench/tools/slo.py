"""Service-level objectives on a run's summary: ``p99_ttft_ms=2000,p99_tpot_ms=100,goodput=0.9``.

A latency bound holds when the run's value is at most the bound; ``goodput=F`` holds when at
least the fraction F of the finished requests met the per-request SLOs of ``metrics.goodput``
(``request_goodput / request_throughput``). A run that finished no request, or rejected one,
meets no SLO.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LATENCY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
SECONDS = ("mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s", "normalized_latency_s")
GOODPUT = "goodput"


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
        try:
            bound = float(raw)
        except ValueError:
            raise SLOError(f"--slo: {metric}={raw!r} is not a number") from None
        if not bound > 0 or math.isinf(bound):
            raise SLOError(f"--slo: {metric} must have a positive, finite bound; got {raw}")
        if metric == GOODPUT:
            if bound > 1:
                raise SLOError(f"--slo: goodput is a fraction of requests in (0, 1]; got {raw}")
            if not goodput_set:
                raise SLOError("--slo: goodput needs per-request SLOs in metrics.goodput "
                               "(e.g. metrics.goodput='ttft:2000 tpot:100')")
        bounds[metric] = bound
    if not bounds:
        raise SLOError(f"--slo: give at least one bound ({allowed})")
    return SLO(bounds)


def measured(summary: Mapping[str, object], metric: str) -> float:
    """The run's value of an SLO metric (NaN where the run has none)."""
    if metric == GOODPUT:
        good, total = summary.get("request_goodput"), summary.get("request_throughput")
        if not isinstance(good, (int, float)) or not isinstance(total, (int, float)) or not total:
            return math.nan
        return float(good) / float(total)
    value = summary.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def meets(summary: Mapping[str, object], slo: SLO) -> tuple[bool, str]:
    """Whether the run meets every bound, and what it measured (``p99_ttft_ms=812``)."""
    values = {m: measured(summary, m) for m in slo.bounds}
    shown = ", ".join(f"{m}={v:.4g}" for m, v in values.items())
    if summary.get("num_rejected") or not summary.get("num_finished"):
        rejected, finished = summary.get("num_rejected") or 0, summary.get("num_finished") or 0
        return False, f"{shown}; {rejected} rejected, {finished} finished"
    ok = all(not math.isnan(v) and (v >= slo.bounds[m] if m == GOODPUT else v <= slo.bounds[m])
             for m, v in values.items())
    return ok, shown
