"""Paper figures draw from a results index: every figure on the fixture, the CLI, the skips."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("seaborn")

from kvbench.results.store import SUMMARY_COLUMNS, load_index  # noqa: E402
from paper_figs import FIGURES, common, make_fixture  # noqa: E402
from paper_figs.__main__ import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "results_small"
INDEX = FIXTURE / "index.jsonl"


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(path: Path) -> bool:
    return path.read_bytes()[:5] == b"%PDF-"


def _module(name: str):
    import importlib

    return importlib.import_module(f"paper_figs.{name}")


@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_draws_png_and_pdf_from_the_fixture(name, tmp_path, capsys):
    index_df, root = common.load(INDEX)
    paths = _module(name).draw(index_df, tmp_path, root)
    assert sorted(p.name for p in paths) == [f"{name}.pdf", f"{name}.png"]
    png, pdf = sorted(paths, key=lambda p: p.suffix != ".png")
    assert _is_png(png) and png.stat().st_size > 5_000
    assert _is_pdf(pdf) and pdf.stat().st_size > 1_000
    out = capsys.readouterr().out
    assert "skipped" not in out and "falling back" not in out  # the fixture has each experiment


def test_cli_all_draws_every_figure(tmp_path, capsys):
    assert main(["all", "--index", str(INDEX), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"drawn: {', '.join(FIGURES)}; skipped: -; failed: -" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{n}.{ext}" for n in FIGURES for ext in ("png", "pdf")
    )


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "paper_figs", "memory_breakdown", "--index", str(INDEX),
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "memory_breakdown.png").stat().st_size > 0


def test_a_missing_experiment_is_skipped_with_one_line(tmp_path, capsys):
    index_df, root = common.load(INDEX)
    assert _module("sharing").draw(index_df, tmp_path, root, experiment="no-such-experiment") == []
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["sharing: skipped (no runs of experiment 'no-such-experiment' "
                   "with sharing_saving_frac in the index)"]
    assert not any(tmp_path.iterdir())
    assert main(["batch_size", "--index", str(INDEX), "--out", str(tmp_path),
                 "--experiment", "no-such-experiment"]) == 1  # fmt: skip
    assert "batch_size: skipped" in capsys.readouterr().out


def test_all_with_some_experiments_draws_those_and_reports_the_rest(tmp_path, capsys):
    """Only breakdown and memmap runs (and the fixture's GPU kernel file): those draw, the others
    skip, exit code 0."""
    lines = [line for line in INDEX.read_text().splitlines()
             if json.loads(line)["experiment"] in ("paper-breakdown", "paper-memmap")]
    index = tmp_path / "index.jsonl"
    index.write_text("\n".join(lines) + "\n")
    out_dir = tmp_path / "out"
    args = ["all", "--index", str(index), "--out", str(out_dir), "--results-root", str(FIXTURE)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "paper_figs: drawn: memory_breakdown, memory_map, kernel_latency; skipped: batch_size, " \
           "latency_vs_rate, sharing, block_size, memory_pressure, token_time, parallel_rate, beam_rate, " \
           "prefix_rate, chatbot_rate, block_size_rate, preempt_block, announcement; failed: -" in out
    for name in ("batch_size", "latency_vs_rate", "sharing", "block_size", "memory_pressure", "token_time"):
        assert sum(line.startswith(f"{name}: skipped (") for line in out.splitlines()) == 1


def test_fallbacks_when_the_preferred_experiment_is_absent(tmp_path, capsys):
    """Breakdown falls back to every run with memory columns; the memory map to any memmap.npz."""
    index_df, root = common.load(INDEX)
    others = index_df[~index_df["experiment"].isin(["paper-batch", "paper-memmap"])]
    others = pd.concat([others, index_df[index_df["experiment"] == "paper-memmap"]
                        .assign(experiment="some-other-study")])  # fmt: skip
    assert _module("memory_breakdown").draw(others, tmp_path, root)
    assert _module("memory_map").draw(others, tmp_path, root)
    out = capsys.readouterr().out
    assert "memory_breakdown: no runs of experiment 'paper-batch'; falling back" in out
    assert "memory_map: no run of experiment 'paper-memmap' has memmap.npz; falling back to the 2 runs" in out
    assert "skipped" not in out


def test_an_index_without_runs_or_extras_never_crashes(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["all", "--index", str(empty), "--out", str(tmp_path / "a")]) == 1
    assert "drawn: -; skipped: " + ", ".join(FIGURES) in capsys.readouterr().out

    # only the design's columns: figures that need extras skip or fall back, none fails
    rows = [json.loads(line) for line in INDEX.read_text().splitlines()]
    keep = (*SUMMARY_COLUMNS, "run_dir")
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({k: r[k] for k in keep if k in r}) + "\n" for r in rows))
    assert main(["all", "--index", str(bare), "--out", str(tmp_path / "b"),
                 "--results-root", str(FIXTURE)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "failed: -" in out and "sharing: skipped (no run has n, beam_width or prefix_len)" in out


def test_allocator_labels():
    label = common.allocator_label
    assert label("buddy", "max", 16) == "Orca (Max)"
    assert label("buddy", "pow2", 16) == "Orca (Pow2)"
    assert label("buddy", "oracle", 16) == "Orca (Oracle)"
    assert label("buddy", "double", 16) == "buddy (double)"
    assert label("contiguous", "max", 16) == "contiguous (max)"
    assert label("paged", None, 16) == "paged (16)"
    assert label("paged", float("nan"), 256.0) == "paged (256)"
    assert label("paged_prefix", None, pd.NA) == "paged+prefix"
    assert label("paged_prefix", None, 16) == "paged+prefix (16)"
    assert label("paged_prefix", None, 16, with_block=False) == "paged+prefix"
    assert label("fancy", "x", 8) == "fancy (x, 8)"
    assert common.label_order(["paged+prefix (16)", "paged (16)", "paged (1)", "contiguous (max)",
                               "Orca (Oracle)", "Orca (Max)"]) == [
        "Orca (Max)", "Orca (Oracle)", "contiguous (max)", "paged (1)", "paged (16)", "paged+prefix (16)"]


def test_palette_is_stable_across_figures():
    alone = common.palette(["paged (16)"])
    mixed = common.palette(["Orca (Max)", "paged (16)", "paged+prefix (16)"])
    assert alone["paged (16)"] == mixed["paged (16)"]
    shades = common.palette(["paged (1)", "paged (16)", "paged (256)"])
    assert len(set(shades.values())) == 3


def test_sharing_panels_pick_runs_by_knob():
    from paper_figs.sharing import panels

    runs = pd.DataFrame({
        "n": [1, 2, 4, 1, 1, None],
        "beam_width": [1, 1, 1, 4, 1, None],
        "prefix_len": [None, None, None, None, 64, None],
    })  # fmt: skip
    by_knob = panels(runs)
    assert list(by_knob["n"].index) == [0, 1, 2]
    assert list(by_knob["beam_width"].index) == [0, 3]
    assert list(by_knob["prefix_len"].index) == [4]


def test_sharing_panels_keep_the_beam_studys_width_1_runs_out_of_the_n_panel():
    from paper_figs.sharing import panels

    parallel, beam = (json.dumps([f"experiment=paper-sharing-{name}"]) for name in ("parallel", "beam"))
    runs = pd.DataFrame({
        "n": [1, 2, 1, 1],
        "beam_width": [1, 1, 1, 2],
        "prefix_len": [None] * 4,
        "overrides": [parallel, parallel, beam, beam],
    })  # fmt: skip
    by_knob = panels(runs)
    assert list(by_knob["n"].index) == [0, 1]  # not the beam study's width-1 run at n = 1
    assert list(by_knob["beam_width"].index) == [2, 3]


def test_attention_per_token_falls_back_to_the_steps():
    index_df, root = common.load(INDEX)
    rows = index_df[index_df["experiment"] == "paper-block-size"].set_index("block_size")
    from_steps = common.time_per_token(rows.loc[16], root, "attention_s")
    assert math.isclose(from_steps, (0.01 + 0.012 + 0.011) / (8 + 12 + 16 + 20))
    assert math.isclose(common.time_per_token(rows.loc[1], root, "attention_s"), 0.0008 * 3)


def test_fixture_is_small_and_reproducible(tmp_path):
    files = [p for p in FIXTURE.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 700_000  # about 100 runs of a few KiB
    assert not list(FIXTURE.glob("*.lock"))
    make_fixture.write_fixture(tmp_path)
    assert (tmp_path / "index.jsonl").read_text() == INDEX.read_text()
    fresh = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert fresh == {p.relative_to(FIXTURE) for p in files}
    experiments = set(load_index(INDEX)["experiment"])
    assert {"paper-breakdown", "paper-batch", "paper-sharing", "paper-block-size", "paper-pressure",
            "paper-memmap", "paper-token-time"} <= experiments  # fmt: skip
    assert any(e.startswith("paper-rate") for e in experiments)


def test_headline_table_reads_the_fixture():
    from paper_figs.headline import headline, to_markdown
    from kvbench.results.store import load_index

    table = headline(load_index(Path(__file__).parent / "fixtures" / "results_small" / "index.jsonl"))
    assert len(table) > 0 and to_markdown(table).startswith("| measure |")


def test_sustainable_rate_never_counts_a_point_after_saturation():
    from paper_figs.headline import sustainable_rate

    runs = pd.DataFrame({"request_rate": [1.0, 2.0, 3.0, 4.0, 1.0],
                         "normalized_latency_s": [0.04, 0.07, 0.2, 0.05, 0.06]})  # 4 req/s dips back
    assert sustainable_rate(runs) == 2.0  # seeds averaged: 0.05 at 1 req/s, limit 0.10
    assert math.isnan(sustainable_rate(pd.DataFrame({"request_rate": [1.0], "normalized_latency_s": [float("nan")]})))


def test_paper_error_reads_single_values_ranges_lists_and_the_memory_row():
    from paper_figs.headline import paper_error

    assert paper_error("2.00x ± 0.05 (45.6 vs 17.5; 3 seeds)", "2.2x") == "-9%"
    assert paper_error("2.00x (2 vs 1 req/s)", "1.7-2.7x") == "in range"
    assert paper_error("1.50x (3 vs 2 req/s)", "1.7-2.7x") == "-12% below"
    assert paper_error("9.00x", "2.7-8x") == "+12% above"
    assert paper_error("7.16x", "14-24x (HF)") == "-49% below"
    assert paper_error("2: 8.3%, 4: 12.8%, 6: 15.5%", "n 2/4/6: 6.1/8.5/9.8%") == "+36%, +51%, +58%"
    assert paper_error("76.7% ± 1.2%", "Orca 20-38%, vLLM 96%", "paged (16)") == "-20%"
    assert paper_error("15.0% ± 0.1%", "Orca 20-38%, vLLM 96%", "Orca (Max)") == "-25% below"
    assert paper_error("47.3%", "Orca 20-38%, vLLM 96%", "contiguous (oracle)") == "-"
    assert paper_error("3.25x", "-") == "-"
    assert paper_error("2: 8.3%", "n 2/4/6: 6.1/8.5/9.8%") == "-"  # not every listed value measured
