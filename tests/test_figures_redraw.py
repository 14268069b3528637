"""Every committed figure (docs/figures/*.png) redraws byte for byte from the committed results.

PNG is byte-stable with the same matplotlib and fonts (no timestamp is written; the PDF's dates are
dropped too), so the comparison is exact. The full check draws every figure (minutes: slow tier);
two cheap ones run in the fast suite."""
from __future__ import annotations

from pathlib import Path

import pytest

from paper_figs import BEYOND_FIGURES, FIGURES, HYBRID_FIGURES, TRACE_FIGURES
from paper_figs.__main__ import draw_figures

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "figures"
PAPER = ROOT / "results" / "paper" / "index.jsonl"
BEYOND = ROOT / "results" / "paper" / "beyond" / "index.jsonl"
TRACES = ROOT / "results" / "paper" / "traces" / "index.jsonl"
HYBRID = ROOT / "results" / "paper" / "hybrid" / "index.jsonl"


def _redraws_identically(names, index: Path, out: Path) -> None:
    outcome = draw_figures(names, index, out)
    assert not outcome["failed"], outcome
    for name in outcome["drawn"]:
        assert (out / f"{name}.png").read_bytes() == (COMMITTED / f"{name}.png").read_bytes(), name


def test_two_figures_redraw_byte_identically(tmp_path):
    _redraws_identically(["sharing"], PAPER, tmp_path)
    _redraws_identically(["vattention_pages"], BEYOND, tmp_path)


@pytest.mark.slow  # every figure: several minutes on 2 cores
def test_every_committed_figure_redraws_byte_identically(tmp_path):
    _redraws_identically([n for n in FIGURES if (COMMITTED / f"{n}.png").exists()], PAPER, tmp_path)
    _redraws_identically([n for n in BEYOND_FIGURES if (COMMITTED / f"{n}.png").exists()], BEYOND, tmp_path)
    _redraws_identically([n for n in TRACE_FIGURES if (COMMITTED / f"{n}.png").exists()], TRACES, tmp_path)
    _redraws_identically([n for n in HYBRID_FIGURES if (COMMITTED / f"{n}.png").exists()], HYBRID, tmp_path)
    # the 70B Azure panel: traces_azure drawn for its own experiment (results/paper/traces/README.md)
    from kvbench.results.store import load_index
    from paper_figs import traces_azure

    seventy = tmp_path / "70b"
    traces_azure.draw(load_index(TRACES), seventy, TRACES.parent, experiment="traces-azure-70b")
    (seventy / "traces_azure.png").rename(tmp_path / "traces_azure_70b.png")
    assert (tmp_path / "traces_azure_70b.png").read_bytes() == (COMMITTED / "traces_azure_70b.png").read_bytes()
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    assert drawn == {p.stem for p in COMMITTED.glob("*.png")}  # no committed figure without its script and data
