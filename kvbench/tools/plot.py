"""``kvbench-plot``: any metric against any setting or metric, from an index or a sweep dir.

    kvbench-plot results --x request_rate --y p99_ttft_ms --where workload=sharegpt --out ttft
    kvbench-plot results/runs/adhoc/<sweep id> --x request_rate --y request_throughput --logx

One line (or bar group, when x is not numeric) per value of ``--hue`` (default the allocator's
label), one panel per value of ``--facet``; where several runs share a point (seeds) the mean is
drawn with a band (bars: an error bar) of the 95% Student t interval of the mean, and a note
says how many runs each point averages (n) and their largest sd. Runs that differ in a setting
the plot does not draw (x, hue, facet) are never averaged: the command refuses and names it. Several
``--y`` metrics (comma-separated) are series of their own. ``--table steps`` draws each run's
steps (``time_s`` against ``mem_token_frac``, say) instead of its summary. Writes ``OUT.png``
and ``OUT.svg`` (each to a temporary name, then renamed). Bad input: one line, exit 2, nothing
written.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kvbench.cli import OneLineParser, command
from kvbench.results.dropped import Dropped
from kvbench.results.naming import cell
from kvbench.results.outputs import OutputError, check_target, write_many
from kvbench.tools.plot_data import (PlotError, check_columns, combine, is_numeric, is_setting, load_runs, select,
                                     series_points, steps_points)

FORMATS = ("png", "svg")
METRIC_FACET = "metric"  # --facet metric: a panel per --y metric, each with its own scale
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
HATCHES = ("", "//", "..", "xx", "\\\\", "--", "++", "oo", "||", "**")
CONTEXT = (("model", "model"), ("gpu_profile", "GPU"), ("workload", "workload"), ("request_rate", "rate"))
UNITS = {"_ms": "ms", "_s": "s", "_frac": "fraction", "_throughput": "per s", "_bytes": "bytes"}


@dataclass
class PlotSpec:
    """One figure: what to draw from which runs, and where."""
    x: str
    y: list[str]
    hue: str | None = "allocator_label"
    facet: str | None = None
    where: list[str] = field(default_factory=list)
    logx: bool = False
    logy: bool = False
    table: str = "summary"
    title: str | None = None


def axis_label(column: str) -> str:
    """``p99_ttft_ms`` -> ``p99 ttft (ms)``."""
    for suffix, unit in UNITS.items():
        if column.endswith(suffix):
            stem = column[: -len(suffix)] if suffix != "_throughput" else column
            return f"{stem.replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def context_line(runs: pd.DataFrame) -> str:
    """Model, GPU, workload and rate of the selected runs (``several`` where they differ)."""
    parts = []
    for column, name in CONTEXT:
        if column not in runs.columns:
            continue
        values = sorted({cell(v) for v in runs[column]})
        parts.append(f"{name} {values[0]}" if len(values) == 1 else f"{name}: {len(values)} values")
    return ", ".join(parts)


def points_for(spec: PlotSpec, runs: pd.DataFrame, index_path: Path, dropped: Dropped | None = None) -> pd.DataFrame:
    """The checked selection of ``runs`` reduced to the figure's points; runs that give no point are
    noted in ``dropped`` by reason."""
    if spec.table == "steps":
        return steps_points(runs, index_path, spec.x, spec.y, spec.hue, spec.facet)
    check_columns(runs, [spec.x], "--x")
    check_columns(runs, spec.y, "--y")
    runs, hue, hue_parts = combine(runs, spec.hue, "--hue")
    facets = [c.strip() for c in (spec.facet or "").split(",") if c.strip()]
    facet_metric = METRIC_FACET in facets and METRIC_FACET not in runs.columns
    runs, facet, facet_parts = combine(runs, ",".join(c for c in facets if not (facet_metric and c == METRIC_FACET)),
                                       "--facet")
    for y in spec.y:
        if not is_numeric(runs[y]):
            raise PlotError(f"--y: {y} is not a numeric column of the selected runs")
    x_is_setting = is_setting(spec.x) or not is_numeric(runs[spec.x])
    return series_points(runs, spec.x, spec.y, hue, facet, x_is_setting, [*hue_parts, *facet_parts], facet_metric,
                         spec.logx, spec.logy, dropped)


def _style(series: list[str]) -> dict[str, tuple[object, str, str]]:
    """A distinct colour, marker and hatch per series, in order of appearance."""
    import matplotlib  # start-up time: matplotlib, only when drawing

    colours = matplotlib.colormaps["tab10" if len(series) <= 10 else "tab20"].colors
    return {s: (colours[i % len(colours)], MARKERS[i % len(MARKERS)], HATCHES[i % len(HATCHES)])
            for i, s in enumerate(series)}


def draw(points: pd.DataFrame, spec: PlotSpec, context: str):
    """The figure: a panel per facet, a line (or bars) per series, one legend naming every series."""
    import matplotlib  # start-up time: matplotlib, only when drawing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib, only when drawing
    from matplotlib.lines import Line2D  # start-up time: matplotlib, only when drawing
    from matplotlib.patches import Patch  # start-up time: matplotlib, only when drawing

    facets = list(dict.fromkeys(points["facet"]))
    series = list(dict.fromkeys(points["series"]))
    style = _style(series)
    categorical = points["x"].map(lambda v: isinstance(v, str)).any()
    ncols = min(len(facets), 3)
    nrows = -(-len(facets) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False, sharey=False)
    categories = list(dict.fromkeys(points["x"])) if categorical else []
    for ax, facet in zip(axes.flat, facets):
        part = points[points["facet"] == facet]
        for i, name in enumerate(series):
            colour, marker, hatch = style[name]
            line = part[part["series"] == name]
            if line.empty:
                continue
            if categorical:
                width = 0.8 / len(series)
                xs = [categories.index(v) - 0.4 + width * (i + 0.5) for v in line["x"]]
                ax.bar(xs, line["y"], width=width, color=colour, hatch=hatch, edgecolor="black", linewidth=0.4,
                       yerr=line["y_ci95"].fillna(0.0), capsize=2)
                continue
            line = line.sort_values("x")
            ax.plot(line["x"], line["y"], color=colour, marker=marker if spec.table != "steps" else None,
                    markersize=5, linewidth=1.4)
            if line["y_ci95"].notna().any():
                half = line["y_ci95"].fillna(0.0)
                ax.fill_between(line["x"], line["y"] - half, line["y"] + half, color=colour, alpha=0.18, linewidth=0)
        if categorical:
            ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right", fontsize=8)
        if spec.logx and not categorical:
            ax.set_xscale("log")
        if spec.logy:
            ax.set_yscale("log")
        ax.set_xlabel(axis_label(spec.x))
        metric = str(facet).rsplit(", ", 1)[-1]
        shown = spec.y[0] if len(spec.y) == 1 else metric if metric in spec.y else None
        ax.set_ylabel(axis_label(shown) if shown else "value")
        if spec.facet:
            by_metric = METRIC_FACET in spec.facet.split(",")
            ax.set_title(str(facet) if by_metric else f"{spec.facet} = {facet}", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(facets):]:
        ax.set_visible(False)
    if categorical:
        handles = [Patch(facecolor=style[s][0], hatch=style[s][2], edgecolor="black", label=s) for s in series]
    else:
        handles = [Line2D([], [], color=style[s][0], marker=style[s][1], label=s) for s in series]
    title = spec.title or f"{', '.join(spec.y)} against {spec.x}"
    fig.suptitle(f"{title}\n{context}", fontsize=10)
    by_metric = METRIC_FACET in (spec.facet or "").split(",")
    legend_title = spec.hue if spec.hue and (len(spec.y) == 1 or by_metric) else None
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.88), title=legend_title, fontsize=8,
               frameon=False)
    fig.text(0.01, 0.0, repeats_note(points), fontsize=8, va="top")
    same = coinciding(points)
    if same:  # lines drawn on top of each other: say which, so that no series is hidden unseen
        fig.text(0.01, -0.04, "drawn over each other (equal at every point): " + "; ".join(", ".join(g) for g in same),
                 fontsize=8, va="top")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def repeats_note(points: pd.DataFrame) -> str:
    """How many runs (seeds) each point averages, and what its band or error bar shows."""
    counts = sorted({int(n) for n in points["runs"]})
    n = f"n = {counts[0]}" if len(counts) == 1 else f"n = {counts[0]} to {counts[-1]}"
    if counts[-1] < 2:
        return f"one run per point ({n}): no spread drawn"
    sd = points["y_sd"].dropna()
    return (f"each point: the mean of its runs ({n} seeds); band or bar: 95% t interval of the mean "
            f"(sd over runs up to {sd.max():.4g})")


def coinciding(points: pd.DataFrame) -> list[list[str]]:
    """Groups of series whose points are equal (to 4 significant digits) in every panel."""
    shapes: dict[str, tuple] = {}
    for name, part in points.groupby("series", sort=False):
        ordered = part.sort_values(["facet", "x"], key=lambda c: c.astype(str))
        shapes[name] = tuple((f, str(x), float(f"{y:.4g}")) for f, x, y in zip(ordered["facet"], ordered["x"],
                                                                                ordered["y"]))
    groups: dict[tuple, list[str]] = {}
    for name, shape in shapes.items():
        groups.setdefault(shape, []).append(str(name))
    return [names for names in groups.values() if len(names) > 1]


def targets(out: str | Path, force: bool = False) -> list[Path]:
    """``OUT.png`` and ``OUT.svg``, each checked by the one writer (``kvbench.results.outputs``);
    OutputError for an ``--out`` that names no file or a directory."""
    base = Path(out)
    if str(out) == "" or base.name in ("", ".", ".."):
        raise OutputError(f"--out: {str(out)!r} names no file; give a path without extension")
    if base.is_dir():
        raise OutputError(f"--out: {out} is a directory; give a file name inside it (OUT.png and OUT.svg are written)")
    paths = [base.with_name(f"{base.name}.{fmt}") for fmt in FORMATS]
    for path in paths:
        check_target(path, force=force)
    return paths


def save(fig, out: Path, force: bool = False) -> list[Path]:
    """``out``.png and ``out``.svg, both or neither (``kvbench.results.outputs.write_many``)."""
    import matplotlib.pyplot as plt  # start-up time: matplotlib, only when drawing

    try:
        paths = targets(out, force)
        writers = [lambda f, fmt=fmt: fig.savefig(f, format=fmt, dpi=120, bbox_inches="tight") for fmt in FORMATS]
        return write_many(paths, writers, force=force)
    finally:
        plt.close(fig)


def plot(source: str | Path, spec: PlotSpec, out: str | Path, force: bool = False,
         dropped: Dropped | None = None) -> list[Path]:
    """Draw ``spec`` from ``source`` (index, results folder or sweep dir) into OUT.png and OUT.svg;
    the selected runs that give no point are noted in ``dropped``."""
    loaded = load_runs(source)
    runs = select(loaded.runs, spec.where) if spec.where else loaded.runs
    points = points_for(spec, runs, loaded.index_path, dropped)
    if dropped is not None:
        dropped.total = len(runs)
    return save(draw(points, spec, context_line(runs)), Path(out), force)


def _columns(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="kvbench-plot", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="an index file, a results folder (its index.jsonl) or a sweep's directory")
    p.add_argument("--x", required=True, help="the column on the x axis (a setting or a metric)")
    p.add_argument("--y", required=True, help="the metric(s) on the y axis, comma-separated")
    p.add_argument("--hue", default="allocator_label", help="one line per value of this column, or of "
                   "several (allocator_label,n) (default %(default)s; 'none' for a single series)")
    p.add_argument("--facet", help="one panel per value of this column (or of several: model,workload; "
                   "'metric': a panel per --y metric)")
    p.add_argument("--where", action="append", default=[], metavar="COND",
                   help="keep runs meeting COND (COL=V, COL!=V, COL>V, ..., COL~PATTERN a shell pattern); repeatable")
    p.add_argument("--logx", action="store_true", help="log x axis")
    p.add_argument("--logy", action="store_true", help="log y axis")
    p.add_argument("--table", choices=("summary", "steps"), default="summary",
                   help="summary rows (default) or each run's steps.parquet")
    p.add_argument("--title", help="the figure's title (default: y against x); the context line follows")
    p.add_argument("--out", default="kvbench-plot", help="output path without extension (default %(default)s); "
                   "OUT.png and OUT.svg, never a link, a folder or a run's file")
    p.add_argument("--force", action="store_true", help="replace OUT.png and OUT.svg if they exist")
    return p


def spec_of(args: argparse.Namespace) -> PlotSpec:
    """The figure the command line asks for."""
    hue = None if str(args.hue).lower() in ("none", "") else args.hue
    return PlotSpec(x=args.x, y=_columns(args.y), hue=hue, facet=args.facet, where=list(args.where),
                    logx=args.logx, logy=args.logy, table=args.table, title=args.title)


@command("kvbench-plot")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spec = spec_of(args)
    try:
        if not spec.y:
            raise PlotError("--y: give at least one metric")
        targets(args.out, args.force)  # before any work
        dropped = Dropped()
        written = plot(args.source, spec, args.out, args.force, dropped)
    except (PlotError, OutputError) as exc:
        print(f"kvbench-plot: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvbench-plot: error: --out: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    dropped.say("kvbench-plot")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
