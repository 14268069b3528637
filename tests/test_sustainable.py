"""The sustainable-rate rule: latency, served and queue tests, "below" the lowest rate, bisection."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvbench.engine.keepup import served_frac, ttft_growth
from paper_figs.sustainable import Sustained, bisect_knee, ratio_text, slo_rate, sustained, tolerance


def _points(rates, latency, served=None, growth=None, n=10_000):
    frame = pd.DataFrame({"request_rate": rates, "normalized_latency_s": latency, "num_requests": n,
                          "p99_ttft_s": [0.5] * len(rates)})
    if served is not None:
        frame["served_frac"], frame["ttft_growth"] = served, growth
    return frame


def test_a_system_saturated_at_the_lowest_rate_sustains_below_it():
    # Orca (Max) on Alpaca: latency rises gently, but it serves a third of what is offered
    runs = _points([10, 20, 30], [0.5, 0.6, 0.7], served=[0.33, 0.2, 0.15], growth=[0.9, 1.5, 2.0])
    got = sustained(runs)
    assert got.below == 10 and math.isnan(got.rate) and got.text() == "< 10"
    paged = sustained(_points([10, 20, 30], [0.05, 0.06, 0.5], served=[1.0, 0.99, 0.7], growth=[0, 0.001, 0.3]))
    assert paged.rate == 20
    assert ratio_text(paged, got) == "more than 2.00x (20 vs < 10 req/s)"  # a bound, never a ratio to 10
    level = sustained(_points([10, 20], [0.05, 0.5], served=[1.0, 0.7], growth=[0.0, 0.3]))
    assert ratio_text(level, got).startswith("no ratio (10 vs < 10 req/s")  # never "1.00x"


def test_the_queue_test_alone_stops_a_point_whose_latency_and_served_rate_pass():
    runs = _points([1, 2, 3], [0.05, 0.06, 0.07], served=[1.0, 0.99, 0.98], growth=[0.0, 0.0, 0.05])
    assert sustained(runs).rate == 2


def test_the_served_test_allows_for_the_count_noise_of_a_short_trace():
    short = _points([1, 2], [0.05, 0.06], served=[1.0, 0.88], growth=[0.0, 0.0], n=100)  # 2/sqrt(100) = 0.2
    long = _points([1, 2], [0.05, 0.06], served=[1.0, 0.88], growth=[0.0, 0.0], n=100_000)
    assert sustained(short).rate == 2 and sustained(long).rate == 1


def test_the_knee_is_found_between_grid_points():
    true_knee = 23.4  # the system keeps up below it
    tried = []

    def passes(rate):
        tried.append(rate)
        return rate <= true_knee

    low, high, runs = bisect_knee(passes, 20.0, 30.0)  # the grid: 20 passes, 30 fails
    assert low <= true_knee < high and high - low <= tolerance(low) == 1.0
    assert all(20 < r < 30 for r in tried) and runs == len(tried) == 4
    low, high, _ = bisect_knee(lambda r: r <= 1.33, 1.0, 1.5)  # below 20 req/s: 5% of the rate
    assert low <= 1.33 < high and high - low <= tolerance(low) < 0.1


def test_runs_without_keep_up_columns_use_the_mean_ttft_proxy():
    runs = pd.DataFrame({"request_rate": [1.0, 2.0], "normalized_latency_s": [0.05, 0.06],
                         "mean_ttft_s": [0.1, 30.0], "num_requests": [3600, 7200]})  # 3600 s traces
    got = sustained(runs)
    assert got.proxy and got.rate == 2  # 2 * 30 / 3600 = 0.017 <= 0.02: the queue is not growing
    runs.loc[1, "mean_ttft_s"] = 60.0  # 0.033: a growing queue
    assert sustained(runs).rate == 1 and sustained(runs.iloc[:1]).ceiling


def test_slo_rate_and_ceiling():
    runs = _points([1, 2, 3], [0.05, 0.05, 0.05])
    runs["p99_ttft_s"] = [0.5, 1.9, 2.5]
    assert slo_rate(runs).rate == 2
    assert slo_rate(runs.iloc[:2]).text() == ">= 2"
    assert ratio_text(Sustained(4.0, ceiling=True), Sustained(2.0)) == ">= 2.00x (>= 4 vs 2 req/s)"


def _requests(arrival, ttft, e2e):
    arrival, ttft, e2e = (np.asarray(v, dtype=float) for v in (arrival, ttft, e2e))
    return pd.DataFrame({"status": "finished", "arrival_s": arrival, "ttft_s": ttft, "finish_s": arrival + e2e})


def test_served_frac_and_ttft_growth_on_made_up_traces():
    arrival = np.arange(0, 100, 0.1)  # 10 req/s for 100 s
    steady = _requests(arrival, np.full(1000, 0.2), np.full(1000, 3.0))
    assert served_frac(steady) == pytest.approx(1.0, abs=0.01)
    assert ttft_growth(steady) == pytest.approx(0.0, abs=1e-12)
    # served at 8 req/s in arrival order: the n-th request finishes at n / 8 + 3
    finish = np.arange(1000) / 8 + 3.0
    saturated = _requests(arrival, finish - 3.0 + 0.2 - arrival, finish - arrival)
    assert served_frac(saturated) == pytest.approx(0.8, abs=0.02)
    assert ttft_growth(saturated) == pytest.approx(0.25, abs=0.01)  # 10 / 8 - 1
    assert served_frac(steady.iloc[:0]) is None
    slow = _requests(arrival, np.full(1000, 0.2), np.full(1000, 60.0))  # latency > half the trace
    assert served_frac(slow) is None
    runs = _points([1, 2], [0.05, 0.06], served=[1.0, float("nan")], growth=[0.0, 0.0])
    assert sustained(runs).rate == 2  # the served test is skipped, the queue test still holds


def test_the_knee_tool_refuses_bad_input_with_one_line_and_runs_nothing(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "sustainable_knee.py"
    spec = importlib.util.spec_from_file_location("sustainable_knee", path)
    knee = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(knee)
    assert knee.main(["--experiment", "no-such-study"]) == 2
    assert knee.main(["--experiment", "paper-rate-opt66b-sharegpt", "--override", "system.no_such_key=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no-such-study" in err[0] and "system.no_such_key" in err[1]
    assert knee.grid_rates("paper-rate-opt13b-alpaca") == [10, 20, 30, 40, 50, 60]
