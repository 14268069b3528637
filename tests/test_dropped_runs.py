"""Nothing selected is dropped without a word: ``kvbench-plot``, ``kvbench-report`` and
``kvbench-results --compare`` say on stderr how many selected runs they did not draw or use, one
line per reason (``kvbench.results.dropped``), and the report refuses what the plot refuses.

Hand-made index rows (three paged runs at request rates 1, 2 and 4 unless a case changes one), so
that each expected line is known exactly.
"""
from __future__ import annotations

import math

import pandas as pd
import pytest

from kvbench.results.store import write_run

STEPS = pd.DataFrame({"time_s": [0.0, 1.0], "mem_token_frac": [0.2, 0.4], "mem_reserved_frac": [0.1, 0.1],
                      "mem_internal_frac": [0.1, 0.1], "mem_external_frac": [0.6, 0.4]})


def _run(root, run_id: str, **fields) -> None:
    row = {"run_id": run_id, "experiment": "d", "workload": "sharegpt", "model": "opt-13b", "gpu_profile": "a100-40gb",
           "allocator": "paged", "allocator_label": "paged", "block_size": 16, "commit": "abc", "seed": 0,
           "mem_token_frac": 0.5, "mem_reserved_frac": 0.1, "mem_internal_frac": 0.1, "mem_external_frac": 0.3,
           **fields}
    row = {k: v for k, v in row.items() if v is not _ABSENT}
    write_run(root / "runs" / "d" / run_id, row, STEPS, pd.DataFrame(), root / "index.jsonl")


_ABSENT = object()  # a column the row does not hold at all


def _three(root, third: dict | None = None, **common) -> None:
    """Runs at rates 1, 2, 4 (throughput = rate, p99 TTFT = 100 / rate); ``third`` changes the last."""
    for i, rate in enumerate((1.0, 2.0, 4.0)):
        fields = {"request_rate": rate, "request_throughput": rate, "p99_ttft_ms": 100.0 / rate, **common}
        if i == 2 and third:
            fields |= third
        _run(root, f"r{i}", **fields)


def _plot(root, capsys, *args):
    from kvbench.tools.plot import main

    code = main([str(root), "--x", "request_rate", *args, "--out", str(root / "fig")])
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line]


@pytest.mark.parametrize("third, args, line", [
    ({"request_rate": math.inf}, ["--y", "request_throughput"],
     "1 of 3 selected runs not drawn: request_rate is inf (not finite) on the x axis"),
    ({"request_rate": None}, ["--y", "request_throughput"],
     "1 of 3 selected runs not drawn: request_rate is null (not applicable) on the x axis"),
    ({"p99_ttft_ms": None}, ["--y", "p99_ttft_ms"],
     "1 of 3 selected runs not drawn: p99_ttft_ms is null (not applicable)"),
    ({"p99_ttft_ms": _ABSENT}, ["--y", "p99_ttft_ms"],
     "1 of 3 selected runs not drawn: p99_ttft_ms is null (not applicable)"),
    ({"p99_ttft_ms": math.inf}, ["--y", "p99_ttft_ms"],
     "1 of 3 selected runs not drawn: p99_ttft_ms is inf (not finite)"),
    ({"p99_ttft_ms": 0.0}, ["--y", "p99_ttft_ms", "--logy"],
     "1 of 3 selected runs not drawn: p99_ttft_ms is <= 0 (a log axis cannot draw it)"),
    ({"request_throughput": None}, ["--y", "request_throughput,p99_ttft_ms"],
     "1 of 3 selected runs not drawn: request_throughput is null (not applicable)"),
])
def test_plot_says_each_run_it_does_not_draw(tmp_path, capsys, third, args, line):
    _three(tmp_path, third)
    code, err = _plot(tmp_path, capsys, *args)
    assert code == 0 and err == [f"kvbench-plot: {line}"]
    assert (tmp_path / "fig.png").is_file()


def test_plot_counts_each_reason_once_per_run(tmp_path, capsys):
    _three(tmp_path)
    _run(tmp_path, "r3", request_rate=math.inf, request_throughput=None, p99_ttft_ms=None)
    _run(tmp_path, "r4", request_rate=8.0, request_throughput=None, p99_ttft_ms=None)
    code, err = _plot(tmp_path, capsys, "--y", "request_throughput,p99_ttft_ms")
    assert code == 0 and err == [
        "kvbench-plot: 1 of 5 selected runs not drawn: request_rate is inf (not finite) on the x axis",
        "kvbench-plot: 1 of 5 selected runs not drawn: request_throughput is null (not applicable)",
        "kvbench-plot: 1 of 5 selected runs not drawn: p99_ttft_ms is null (not applicable)"]


def test_plot_with_every_run_left_out_is_refused(tmp_path, capsys):
    _three(tmp_path, {"request_rate": math.inf, "p99_ttft_ms": None}, request_rate=-1.0)
    code, err = _plot(tmp_path, capsys, "--y", "p99_ttft_ms", "--logx")
    assert code == 2 and err == ["kvbench-plot: error: nothing to draw: every selected run is left out (request_rate "
                                 "is <= 0 (a log axis cannot draw it) on the x axis; request_rate is inf (not finite) "
                                 "on the x axis)"]
    assert not list(tmp_path.glob("fig*"))


def test_plot_drawing_everything_says_nothing(tmp_path, capsys):
    _three(tmp_path)
    assert _plot(tmp_path, capsys, "--y", "request_throughput") == (0, [])


# ------------------------------------------------------------------------------ kvbench-report
def _report(root, capsys, *args):
    from kvbench.tools.report import main

    code = main([str(root), "--out", str(root / "r.html"), *args])
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line]


@pytest.mark.parametrize("args, word", [
    (["--metrics", "workload"], "workload is not a numeric column"),
    (["--metrics", "request_throughput,allocator_label"], "allocator_label is not a numeric column"),
    (["--metrics", "p99_tft_ms"], "p99_tft_ms"),
])
def test_report_refuses_what_plot_refuses(tmp_path, capsys, args, word):
    _three(tmp_path)
    code, err = _report(tmp_path, capsys, *args)
    assert code == 2 and len(err) == 1 and err[0].startswith("kvbench-report: error: ") and word in err[0]
    assert not (tmp_path / "r.html").exists()


def test_report_refuses_a_figure_plot_would_refuse(tmp_path, capsys):
    """Runs that differ in two settings besides the x axis: the figure would average them."""
    _three(tmp_path)
    _run(tmp_path, "w", request_rate=1.0, request_throughput=5.0, p99_ttft_ms=5.0, workload="alpaca",
         model="opt-6.7b")
    _run(tmp_path, "w2", request_rate=1.0, request_throughput=6.0, p99_ttft_ms=6.0, workload="alpaca")
    code, err = _report(tmp_path, capsys, "--metrics", "request_throughput")
    assert code == 2 and len(err) == 1 and "figure request_throughput against request_rate" in err[0]
    assert not (tmp_path / "r.html").exists()


def test_report_says_each_run_a_figure_or_the_compare_view_leaves_out(tmp_path, capsys):
    _three(tmp_path, {"request_rate": math.inf, "p99_ttft_ms": None})
    code, err = _report(tmp_path, capsys, "--metrics", "request_throughput,p99_ttft_ms")
    assert code == 0 and (tmp_path / "r.html").is_file()
    assert err == [
        "kvbench-report: compare: 1 of 3 selected runs not used: p99_ttft_ms is null (not applicable)",
        "kvbench-report: figure request_throughput against request_rate: 1 of 3 selected runs not drawn: "
        "request_rate is inf (not finite) on the x axis",
        "kvbench-report: figure p99_ttft_ms against request_rate: 1 of 3 selected runs not drawn: "
        "request_rate is inf (not finite) on the x axis"]


# ------------------------------------------------------------------------------ kvbench-results --compare
def test_compare_says_each_run_a_metric_leaves_out(tmp_path, capsys):
    from kvbench.results.cli import main

    _three(tmp_path, {"p99_ttft_ms": None, "request_throughput": _ABSENT})
    code = main(["--index", str(tmp_path / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                 "--metrics", "request_throughput,p99_ttft_ms"])
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert code == 0 and err == [
        "kvbench-results: 1 of 3 selected runs not used: request_throughput is null (not applicable)",
        "kvbench-results: 1 of 3 selected runs not used: p99_ttft_ms is null (not applicable)"]
