"""``kvbench-plot``: series, the refusal to average runs that differ, bad input, the files."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from kvbench.tools.plot import PlotSpec, draw, main, points_for
from kvbench.tools.plot_data import load_runs
from kvbench.results.store import write_run


def _run(root, run_id: str, **summary) -> None:
    row = {"run_id": run_id, "experiment": "p", "workload": "sharegpt", "model": "opt-13b", "gpu_profile": "a100-40gb",
           "mem_cached_frac": None, "commit": "abc", "seed": 0, **summary}
    write_run(root / "runs" / "p" / run_id, row, pd.DataFrame({"time_s": [0.0, 1.0], "mem_token_frac": [0.2, 0.4]}),
              pd.DataFrame(), root / "index.jsonl")


@pytest.fixture
def results(tmp_path):
    for rate in (1.0, 2.0, 4.0):
        for seed in (0, 1):
            for label, allocator, reserve, base in (("orca-max", "buddy", "max", 1.0), ("paged", "paged", None, 3.0)):
                _run(tmp_path, f"{label}-{rate}-{seed}", allocator=allocator, reserve=reserve, allocator_label=label,
                     block_size=16, request_rate=rate, seed=seed, request_throughput=base * rate + seed,
                     p99_ttft_ms=100.0 / rate, overrides=json.dumps([f"allocator={label}", f"seed={seed}"]))
    return tmp_path


def test_mean_and_spread_over_seeds_one_series_per_hue_value(results):
    loaded = load_runs(results)
    points = points_for(PlotSpec(x="request_rate", y=["request_throughput"]), loaded.runs, loaded.index_path)
    assert sorted(points["series"].unique()) == ["orca-max", "paged"]
    paged = points[points["series"] == "paged"].sort_values("x")
    assert list(paged["x"]) == [1.0, 2.0, 4.0]
    assert list(paged["y"]) == [3.5, 6.5, 12.5]  # 3 * rate + mean(seed 0, 1)
    assert list(paged["runs"]) == [2, 2, 2] and paged["y_sd"].round(4).tolist() == [0.7071] * 3


def test_runs_that_differ_in_a_setting_not_drawn_are_refused(results, capsys):
    _run(results, "paged-2-other", allocator="paged", allocator_label="paged", block_size=16, request_rate=2.0,
         workload="alpaca", request_throughput=9.0)
    code = main([str(results), "--x", "request_rate", "--y", "request_throughput", "--out", str(results / "f")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "differ in workload (alpaca, sharegpt)" in err and "allocator_label=paged" in err
    assert not list(results.glob("f.*")) and not list(results.glob(".f*"))
    # drawn as a facet, they are two panels and nothing is averaged across workloads
    assert main([str(results), "--x", "request_rate", "--y", "request_throughput", "--facet", "workload",
                 "--out", str(results / "f")]) == 0


@pytest.mark.parametrize("args, message", [
    (["--x", "request_rat", "--y", "request_throughput"], "--x: no column 'request_rat'; close: request_rate"),
    (["--x", "request_rate", "--y", "p99_tft_ms"], "--y: no column 'p99_tft_ms'; close: p99_ttft_ms"),
    (["--x", "request_rate", "--y", "p99_ttft_ms", "--hue", "alocator"], "--hue: no column 'alocator'"),
    (["--x", "request_rate", "--y", "p99_ttft_ms", "--where", "request_rate>100"], "--where: no run matches"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(results, capsys, args, message):
    code = main([str(results), *args, "--out", str(results / "fig")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err
    assert not list(results.glob("*fig*"))


def test_a_missing_source_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope"), "--x", "a", "--y", "b"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_png_and_svg_with_one_legend_entry_per_series(results, capsys):
    (results / "out").mkdir()  # a missing folder is refused (tests/test_tool_outputs.py)
    assert main([str(results), "--x", "request_rate", "--y", "request_throughput,p99_ttft_ms", "--logx",
                 "--out", str(results / "out" / "tp")]) == 0
    png, svg = results / "out" / "tp.png", results / "out" / "tp.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ET.parse(svg)  # well-formed
    text = svg.read_text()
    for series in ("orca-max / request_throughput", "orca-max / p99_ttft_ms", "paged / request_throughput",
                   "paged / p99_ttft_ms"):
        assert text.count(f"<!-- {series} -->") == 1, series  # matplotlib's SVG names each legend text


def test_the_figure_legend_names_every_series_and_the_title_its_context(results):
    loaded = load_runs(results)
    spec = PlotSpec(x="request_rate", y=["p99_ttft_ms"])
    fig = draw(points_for(spec, loaded.runs, loaded.index_path), spec, "model opt-13b, GPU a100-40gb")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    markers = {h.get_marker() for h in fig.legends[0].legend_handles}
    colours = {h.get_color() for h in fig.legends[0].legend_handles}
    assert labels == ["orca-max", "paged"] and len(markers) == 2 and len(colours) == 2
    assert "model opt-13b, GPU a100-40gb" in fig._suptitle.get_text()


def test_steps_table_draws_each_run_over_time(results):
    loaded = load_runs(results)
    runs = loaded.runs[(loaded.runs["request_rate"] == 1.0) & (loaded.runs["seed"] == 0)]
    points = points_for(PlotSpec(x="time_s", y=["mem_token_frac"], table="steps"), runs, loaded.index_path)
    assert sorted(points["series"].unique()) == ["orca-max", "paged"] and len(points) == 4


def test_a_sweep_dir_selects_its_own_runs(results):
    sweep = results / "runs" / "p" / "sweep1"
    for rate in (1.0, 2.0):
        write_run(sweep / f"s-{rate}", {"run_id": f"s-{rate}", "experiment": "p", "allocator": "paged",
                                         "request_rate": rate, "request_throughput": rate},
                  pd.DataFrame(), pd.DataFrame(), results / "index.jsonl")
    loaded = load_runs(sweep)
    assert sorted(loaded.runs["run_id"]) == ["s-1.0", "s-2.0"] and loaded.what.startswith("sweep")


def test_series_drawn_over_each_other_are_named_under_the_figure(results):
    for rate in (1.0, 2.0, 4.0):
        for seed in (0, 1):
            _run(results, f"twin-{rate}-{seed}", allocator="paged_prefix", allocator_label="paged_prefix",
                 block_size=16, request_rate=rate, seed=seed, request_throughput=3.0 * rate + seed,
                 p99_ttft_ms=100.0 / rate)
    loaded = load_runs(results)
    spec = PlotSpec(x="request_rate", y=["request_throughput"])
    fig = draw(points_for(spec, loaded.runs, loaded.index_path), spec, "")
    notes = [t.get_text() for t in fig.texts if t is not fig._suptitle]
    assert notes == ["each point: the mean of its runs (n = 2 seeds); band or bar: 95% t interval of the mean "
                     "(sd over runs up to 0.7071)",
                     "drawn over each other (equal at every point): paged, paged_prefix"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["orca-max", "paged", "paged_prefix"]
