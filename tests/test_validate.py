"""The cost model against published measurements (kvbench/sim/measurements.csv)."""
from __future__ import annotations

import pytest

from kvbench.sim import cost_model
from kvbench.sim.validate import FIT_KEYS, evaluate, fit, leave_one_model_out, load_points, main, median_abs_error

# Stated bound: the model's median absolute error over every published point, the project's
# goal (Vidur reports under 9%). In-sample it is about 2% since four constants are calibrated on
# these points; the leave-one-model-out error (slow test below) is the honest figure, about 3.5%.
MEDIAN_BOUND = 0.10


def test_every_point_has_a_source_and_a_positive_measurement():
    points = load_points()
    assert len(points) >= 40
    assert all(p["source"] and float(p["measured_ms"]) > 0 for p in points)


def test_median_error_stays_under_the_stated_bound():
    rows = evaluate(load_points())
    assert median_abs_error(rows) < MEDIAN_BOUND


def test_cli_prints_every_point_and_the_median(capsys, tmp_path):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "median |error|" in out and out.count("gpt-6.7b") >= 14
    assert main(["--file", str(tmp_path / "missing.csv")]) == 2


@pytest.mark.slow
def test_calibrated_defaults_are_the_fit_and_hold_out_under_the_bound():
    points = load_points()
    fitted = fit(points)
    for key in FIT_KEYS:
        assert cost_model.DEFAULTS[key] == pytest.approx(fitted[key], rel=0.02), key
    assert median_abs_error(leave_one_model_out(points)) < MEDIAN_BOUND
