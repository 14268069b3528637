"""kvbench-capacity's served-fraction bound: its floor from measured noise, and the verdict
naming the bound that decided (kvbench/tools/slo.py ``meets``, kvbench/tools/capacity.py)."""
from __future__ import annotations

import math

import pytest

from kvbench.tools.capacity import Answer, Probe
from kvbench.tools.slo import meets, parse_slo, served_floor

RUN = {"p99_ttft_ms": 80.0, "num_finished": 200, "num_rejected": 0, "num_requests": 200}


def test_the_floor_is_one_less_two_measured_sds():
    # sd of served_frac x sqrt(requests) measured at 0.4: at 200 requests 1 - 2 * 0.4 / 14.142
    assert served_floor(200) == pytest.approx(0.943431, abs=1e-6)
    assert served_floor(800) == pytest.approx(1 - 0.8 / math.sqrt(800))


@pytest.mark.parametrize("p99, served, ok, bound", [
    (80.0, 0.95, True, None),  # both hold (0.95 >= 0.9434)
    (80.0, 0.93, False, "served fraction"),  # the old allowance (0.95 - 2/sqrt(200) = 0.81) let it pass
    (120.0, 1.0, False, "SLO"),
    (120.0, 0.90, False, "SLO and served fraction"),
    (80.0, None, True, None),  # a trace shorter than its latencies: not judged
])
def test_the_verdict_names_the_bound_that_decided(p99, served, ok, bound):
    verdict = meets({**RUN, "p99_ttft_ms": p99, "served_frac": served}, parse_slo("p99_ttft_ms=100"))
    assert (verdict.ok, verdict.bound) == (ok, bound)
    assert ("served_frac null" if served is None else f"served_frac={served:.3g} (floor 0.943)") in verdict.detail


def test_rejections_decide_before_any_bound():
    verdict = meets({**RUN, "num_rejected": 1, "served_frac": 1.0}, parse_slo("p99_ttft_ms=100"))
    assert not verdict.ok and verdict.bound == "rejected or unfinished requests"


def test_the_answer_line_says_what_failed_above_it():
    probes = [Probe(2.0, True, "x"), Probe(4.0, False, "y", bound="served fraction"), Probe(3.0, True, "z")]
    assert "(fails at 4 on the served fraction)" in Answer("paged", 3.0, 4.0, probes).line("req/s")
    assert "(fails at the lowest probe on the SLO)" in Answer(
        "paged", None, 2.0, [Probe(2.0, False, "x", bound="SLO")]).line("req/s")


def test_a_run_within_a_loose_latency_slo_that_falls_behind_fails_on_the_served_fraction(tmp_path):
    """ShareGPT, 200 requests at 3 req/s on the defaults (paged), seed 8: served_frac 0.886 (P99 TTFT
    2.5 s, within the 60 s bound); the old code let every such run hold."""
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR
    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "workload=sharegpt", "workload.num_requests=200", "workload.request_rate=3", "seed=8",
            "progress=false", "logger=none", f"results_dir={tmp_path}"])
    verdict = meets(run(cfg, run_dir=tmp_path / "run"), parse_slo("p99_ttft_ms=60000"))
    assert (verdict.ok, verdict.bound) == (False, "served fraction")


def test_a_trace_under_200_requests_is_not_judged_on_its_served_fraction():
    verdict = meets({**RUN, "num_finished": 20, "num_requests": 20, "served_frac": 0.71}, parse_slo("p99_ttft_ms=100"))
    assert verdict.ok and "not judged under 200 requests" in verdict.detail
