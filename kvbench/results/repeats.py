"""The spread of repeated runs (seeds): n, mean, sample sd and a 95% interval of the mean.

The interval is Student's t: ``mean ± t(0.975, n - 1) · sd / √n``, the interval for the mean
of n runs whose results scatter normally; it needs two runs (one run: NaN, no spread known).
Every reader that averages runs over seeds (``kvbench-results --compare``, ``kvbench-plot``,
``kvbench-report``, ``kvbench-capacity``) reports these same figures.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    n: int  # the present (non-NaN) values
    mean: float
    sd: float  # sample standard deviation (n - 1); NaN below two values
    half: float  # half-width of the 95% t interval of the mean; NaN below two values

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """Student's t quantile for a two-sided ``confidence`` interval of the mean of ``n`` values."""
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1))


def spread_of(values: Iterable[float]) -> Spread:
    """n, mean, sd and the 95% t half-width of the present values (NaN where they cannot be had)."""
    present = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(present)
    if n == 0:
        return Spread(0, math.nan, math.nan, math.nan)
    mean = sum(present) / n
    if n < 2:
        return Spread(n, mean, math.nan, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in present) / (n - 1))
    return Spread(n, mean, sd, t_quantile(n) * sd / math.sqrt(n))
