"""The README's ``kvbench-plot`` command for every committed figure draws from results/paper/,
with one legend entry per series."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvbench.tools.plot import context_line, draw, parser, points_for, save, spec_of
from kvbench.tools.plot_data import load_runs, select

ROOT = Path(__file__).resolve().parent.parent
FIGURES = sorted(p.stem for p in (ROOT / "docs" / "figures").glob("*.png"))


def readme_commands() -> dict[str, list[str]]:
    """``--out NAME`` -> the arguments of each README line ``kvbench-plot results/paper...``."""
    text = (ROOT / "README.md").read_text()
    lines = re.findall(r"^kvbench-plot results/paper\S* .*$", text, flags=re.M)
    commands = {}
    for line in lines:
        args = shlex.split(line)[1:]
        commands[args[args.index("--out") + 1]] = args
    return commands


def test_every_committed_figure_has_one_command():
    assert sorted(readme_commands()) == FIGURES


def _draw(name: str, tmp_path) -> None:
    args = parser().parse_args(readme_commands()[name])
    spec = spec_of(args)
    loaded = load_runs(ROOT / args.source)
    runs = select(loaded.runs, spec.where)
    points = points_for(spec, runs, loaded.index_path)
    fig = draw(points, spec, context_line(runs))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(labels) == sorted(points["series"].unique()) and len(labels) == len(set(labels))
    written = save(fig, tmp_path / name)
    assert [p.suffix for p in written] == [".png", ".svg"]


@pytest.mark.parametrize("name", ["vattention_pages"])
def test_a_sample_of_the_commands_draws(name, tmp_path):
    _draw(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", FIGURES)
def test_every_command_draws(name, tmp_path):
    _draw(name, tmp_path)


def test_runs_carry_their_experiment_file():
    """Two studies under one experiment name stay apart by the file that ran them (``--facet``)."""
    runs = load_runs(ROOT / "results" / "paper").runs
    sharing = runs[runs["experiment"] == "paper-sharing"]
    assert set(sharing["experiment_file"]) == {"paper-sharing-parallel", "paper-sharing-beam", "paper-sharing-prefix"}
