"""The cost model against published measurements (kvbench/sim/measurements.csv)."""
from __future__ import annotations

from kvbench.sim.validate import evaluate, load_points, main, median_abs_error

# Stated bound: the model's median absolute error over every published point. The project's
# goal is 10% (Vidur reports under 9%); today's physics reaches about 20% (see README), so the
# test guards against regressions at 25% and fails if a change moves the model further away.
MEDIAN_BOUND = 0.25


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
