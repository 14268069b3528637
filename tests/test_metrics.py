"""Serving metrics with vLLM's definitions: exact values on a hand-traced engine run, per-token
timestamps under preemption, sampling and beams, goodput SLO parsing."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvbench.metrics import (
    MetricsConfigError,
    format_report,
    metric_columns,
    parse_goodput,
    parse_percentiles,
    serving_metrics,
)
from tests.engine_helpers import make_requests
from tests.test_engine import ALLOCATORS, make_engine


def _fcfs_run():
    # the schedule of test_fcfs_admission_and_token_budget_with_chunked_prefill, 1 s per step:
    # r0 emits at t=1, 2; r1 and r2 at t=2, 3
    engine, _ = make_engine("paged", 64, max_num_batched_tokens=8, knobs={"block_size": 4})
    return engine.run(make_requests([(5, 2), (5, 2), (5, 2)]))


def test_token_times_follow_the_traced_schedule():
    out = _fcfs_run()
    times = [[list(t) for t in samples] for samples in out.requests.sort_values("request_id")["token_times_s"]]
    assert times == [[[1.0, 2.0]], [[2.0, 3.0]], [[2.0, 3.0]]]


def test_summary_has_vllm_values_on_the_traced_schedule():
    s = _fcfs_run().summary
    assert (s["completed"], s["failed"], s["total_input_tokens"], s["total_output_tokens"]) == (3, 0, 15, 6)
    assert s["duration_s"] == 3.0
    assert s["request_throughput"] == pytest.approx(1.0)
    assert s["output_throughput"] == pytest.approx(2.0) == s["output_token_throughput"]
    assert s["total_token_throughput"] == pytest.approx(7.0)
    # TTFT 1, 2, 2 s
    assert s["mean_ttft_ms"] == pytest.approx(5000 / 3)
    assert s["median_ttft_ms"] == pytest.approx(2000)
    assert s["std_ttft_ms"] == pytest.approx(1000 * math.sqrt(2) / 3)  # population std
    assert s["p90_ttft_ms"] == pytest.approx(2000) and s["p99_ttft_ms"] == pytest.approx(2000)
    # E2EL 2, 3, 3 s; p90 interpolates between the sorted values 2, 3, 3 at rank 1.8
    assert s["mean_e2el_ms"] == pytest.approx(8000 / 3)
    assert s["p90_e2el_ms"] == pytest.approx(3000)
    assert s["mean_e2e_s"] == pytest.approx(8 / 3)  # the design's column, same quantity in s
    # TPOT excludes the first token: (e2el - ttft) / (2 - 1) = 1 s; ITL pooled: 1 s each
    for name in ("tpot", "itl"):
        assert s[f"mean_{name}_ms"] == pytest.approx(1000) and s[f"std_{name}_ms"] == pytest.approx(0)
    assert s["request_goodput"] is None and s["goodput"] is None  # no SLO configured


def test_goodput_counts_requests_within_every_slo():
    reqs = _fcfs_run().requests
    good = serving_metrics(reqs, 3.0, goodput=parse_goodput("ttft:1500"))
    assert good["request_goodput"] == pytest.approx(1 / 3)  # only r0 (TTFT 1 s)
    assert good["goodput"] == pytest.approx(2 / 3)  # its 2 output tokens
    both = serving_metrics(reqs, 3.0, goodput=parse_goodput("ttft:2500 e2el:2500"))
    assert both["request_goodput"] == pytest.approx(1 / 3)  # r1, r2 miss the E2EL SLO
    assert serving_metrics(reqs, 3.0, goodput={"tpot": 999})["request_goodput"] == 0
    assert serving_metrics(reqs, 3.0, goodput={"tpot": 1000})["request_goodput"] == pytest.approx(1)


def test_one_token_requests_have_no_tpot_and_pass_a_tpot_slo():
    engine, _ = make_engine("paged", 64, knobs={"block_size": 4})
    out = engine.run(make_requests([(4, 1), (4, 1)]))
    assert out.summary["mean_tpot_ms"] is None and out.summary["mean_itl_ms"] is None
    assert out.summary["mean_ttft_ms"] == pytest.approx(1000)
    metrics = serving_metrics(out.requests, out.summary["duration_s"], goodput={"tpot": 1})
    assert metrics["request_goodput"] == pytest.approx(2 / out.summary["duration_s"])


def test_a_preemption_shows_as_a_long_inter_token_gap():
    engine, _ = make_engine("paged", 16, knobs={"block_size": 4})
    out = engine.run(make_requests([(6, 8, 0.0), (6, 8, 0.5)]))
    req = out.requests.set_index("request_id")
    assert req.loc[1, "num_preemptions"] >= 1
    assert req.loc[1, "max_itl_s"] > 1.0  # a steady decode emits once per 1 s step
    assert req.loc[0, "max_itl_s"] == 1.0
    assert out.summary["p99_itl_ms"] > 1000 and out.summary["median_itl_ms"] == 1000


@pytest.mark.parametrize("name,knobs", ALLOCATORS)
@pytest.mark.parametrize("n,beam", [(1, 1), (3, 1), (1, 3)])
def test_one_timestamp_per_output_token_for_every_allocator(name, knobs, n, beam):
    specs = [(3 + (7 * i) % 13, 2 + (5 * i) % 11, 0.3 * i, n, beam) for i in range(12)]
    engine, _ = make_engine(name, 256, knobs=knobs, max_num_batched_tokens=32)
    out = engine.run(make_requests(specs))
    for row in out.requests.itertuples():
        samples = [np.asarray(t) for t in row.token_times_s]
        assert len(samples) == n if beam == 1 else 1 <= len(samples) <= beam
        assert all(len(t) == row.output_len and (np.diff(t) > 0).all() for t in samples)
        assert min(t[0] for t in samples) == row.first_token_s
        assert max(t[-1] for t in samples) == row.finish_s
    assert out.summary["completed"] == 12


def test_rejected_requests_count_as_failed_and_stay_out_of_the_statistics():
    engine, _ = make_engine("paged", 64, max_model_len=16, knobs={"block_size": 4})
    out = engine.run(make_requests([(4, 2), (30, 2)]))
    assert (out.summary["completed"], out.summary["failed"]) == (1, 1)
    assert out.summary["total_input_tokens"] == 4


def test_percentiles_are_configurable_and_named_like_vllm():
    reqs = _fcfs_run().requests
    metrics = serving_metrics(reqs, 3.0, percentiles=parse_percentiles("50,99.9"))
    assert {"p50_ttft_ms", "p99.9_itl_ms"} <= set(metrics) and "p90_ttft_ms" not in metrics
    assert metrics["p50_ttft_ms"] == pytest.approx(2000)
    assert set(metric_columns((50, 99.9))) <= set(metrics)


def test_empty_run_gives_nulls_not_zeros():
    empty = pd.DataFrame({"status": ["rejected"], "prompt_len": [9], "output_len": [2], "n": [1],
                          "beam_width": [1], "ttft_s": [math.nan], "e2e_s": [math.nan],
                          "token_times_s": [[np.empty(0)]]})
    metrics = serving_metrics(empty, 0.0)
    assert metrics["completed"] == 0 and metrics["failed"] == 1
    assert metrics["request_throughput"] is None and metrics["mean_ttft_ms"] is None


@pytest.mark.parametrize("bad", ["ttft", "ttft:abc", "latency:5", "tpot:-1", "e2el:0"])
def test_bad_goodput_is_one_clear_error(bad):
    with pytest.raises(MetricsConfigError, match="metrics.goodput"):
        parse_goodput(bad)


def test_goodput_syntax_matches_vllm():
    assert parse_goodput("ttft:500 tpot:50 e2el:2000") == {"ttft": 500, "tpot": 50, "e2el": 2000}
    assert parse_goodput({"ttft": 500}) == {"ttft": 500}
    assert parse_goodput(None) == {} == parse_goodput("")
    with pytest.raises(MetricsConfigError, match="metrics.percentiles"):
        parse_percentiles([0])


def test_report_reads_like_vllm_bench_serve():
    report = format_report(_fcfs_run().summary)
    for line in ("Successful requests:", "Mean TTFT (ms):", "P99 ITL (ms):", "Median E2EL (ms):",
                 "Time per Output Token (excl. 1st token)"):
        assert line in report
    assert "Request goodput" not in report


def test_peaks_concurrency_and_input_throughput_on_the_traced_schedule():
    # r0 emits at t=1, 2 and finishes at 2; r1, r2 emit at 2, 3 and finish at 3; all arrive at 0
    s = _fcfs_run().summary
    assert s["input_throughput"] == pytest.approx(15 / 3)
    assert s["max_output_tokens_per_s"] == 3.0  # the bucket [2, 3): r0's second token, r1's and r2's first
    assert s["max_concurrent_requests"] == 3
    assert s["concurrency"] == pytest.approx((2 + 3 + 3) / 3)  # sum of E2E latencies / duration
    assert s["p95_ttft_ms"] == pytest.approx(2000)  # P95 by default, next to P90 and P99


def test_peaks_count_one_second_buckets_from_the_first_arrival():
    from kvbench.metrics import peaks

    arrival, finish = np.array([10.0, 10.5, 13.2]), np.array([11.9, 12.1, 14.0])
    streams = [np.array([10.2, 10.4, 11.9]), np.array([10.9, 11.0, 11.5, 12.1]), np.array([13.5, 14.0])]
    # token buckets: [10,11): 3, [11,12): 3, [12,13): 1, [13,14): 1, [14,15): 1
    # requests per bucket: 0: r0 r1, 1: r0 r1, 2: r1, 3: r2, 4: r2
    assert peaks(arrival, finish, streams) == (3.0, 2)


def test_report_names_the_load_and_the_peaks():
    summary = {**_fcfs_run().summary, "max_concurrency": 4, "request_rate": float("inf"), "burstiness": 1.0}
    report = format_report(summary, (90, 95, 99))
    values = {line.split(":")[0]: line.split(":")[1].strip() for line in report.splitlines() if ":" in line}
    assert values["Maximum request concurrency"] == "4" and values["Request rate configured (RPS)"] == "inf"
    assert values["Peak output token throughput (tok/s)"] == "3.00" and values["Peak concurrent requests"] == "3"
    assert values["Input token throughput (tok/s)"] == "5.00" and values["Concurrency (mean in flight)"] == "2.67"
    assert values["Request burstiness"] == "1.00" and "P95 TTFT (ms)" in values
    assert "Maximum request concurrency" not in format_report({**summary, "max_concurrency": None})
