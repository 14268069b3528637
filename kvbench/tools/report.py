"""``kvbench-report <sweep dir or index>``: one self-contained HTML file to send a colleague.

    kvbench-report results/runs/adhoc/<sweep id> --out sweep.html --baseline orca-max

Sections: the settings the runs share and the keys that vary among them; the table of runs with
those keys; the compare view against a baseline (``kvbench-results --compare``); figures drawn
by ``kvbench-plot`` (each metric against the first numeric swept setting, one line per
allocator); the memory breakdown of one run per allocator; provenance (commits, the commands,
dates). Figures are embedded as ``data:`` URIs; the page loads nothing else and runs no script.
The file goes through the one writer (``kvbench.results.outputs``): a target that exists is refused
unless ``--force``; a link, a folder, the results index or a run's folder never; written to a
temporary name and renamed. What ``kvbench-plot`` refuses (a metric that is not a number, a
figure whose runs differ in a setting it does not draw) the report refuses; each selected run a
section leaves out is one line on stderr per reason.
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from kvbench.cli import OneLineParser, command
from kvbench.results.compare import compare_groups
from kvbench.results.dropped import Dropped
from kvbench.results.grouping import distinct_settings, is_seed, settings_that_vary
from kvbench.results.naming import cell
from kvbench.results.outputs import OutputError, check_target, write_text
from kvbench.results.query import QueryError, sort
from kvbench.run.run_figures import memory_over_time
from kvbench.run.sweep import _absolute
from kvbench.tools.plot import PlotSpec, context_line, draw, points_for
from kvbench.tools.plot_data import PlotError, check_columns, is_numeric, is_setting, load_runs, select

DEFAULT_METRICS = ("request_throughput", "p99_ttft_ms", "p99_tpot_ms", "mean_batch_size")
TABLE_METRICS = ("request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                 "normalized_latency_s", "mean_batch_size", "num_preemptions", "num_finished", "num_rejected")
MEMORY = (("mem_token_frac", "token", "#4c72b0"), ("mem_reserved_frac", "reserved", "#dd8452"),
          ("mem_internal_frac", "internal", "#c44e52"), ("mem_external_frac", "external", "#8c8c8c"),
          ("mem_cached_frac", "cached", "#55a868"))
SECTIONS = (("settings", "Settings"), ("runs", "Runs"), ("compare", "Compare"), ("figures", "Figures"),
            ("memory", "Memory breakdown"), ("provenance", "Provenance"))
STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}
td.t,th.t{text-align:left}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
h2{border-bottom:2px solid #ddd;padding-bottom:0.2em;margin-top:1.6em}.note{color:#666;font-size:13px}
nav a{margin-right:1em}"""


def _table(frame: pd.DataFrame, caption: str = "") -> str:
    """An HTML table of ``frame``, ``-`` where a value does not apply."""
    head = "".join(f"<th class='t'>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for value in row:
            text = cell(value)
            klass = "" if isinstance(value, (int, float)) and not isinstance(value, bool) else " class='t'"
            cells.append(f"<td{klass}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption class='note'>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _png_uri(fig) -> str:
    import matplotlib.pyplot as plt  # start-up time: matplotlib, only when drawing

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(uri: str, alt: str) -> str:
    return f"<figure><img src='{uri}' alt='{html.escape(alt)}'><figcaption class='note'>{html.escape(alt)}" \
           "</figcaption></figure>"


def varying_settings(runs: pd.DataFrame) -> list[str]:
    """The settings that vary among the runs, less recorded leaves that repeat another column."""
    return distinct_settings(runs, settings_that_vary(runs))


def settings_section(runs: pd.DataFrame, varying: Sequence[str]) -> str:
    differ = {*varying, *settings_that_vary(runs)}  # the recorded leaves that repeat a varying column too
    shared = [(c, cell(runs[c].iloc[0])) for c in runs.columns if c not in differ and is_setting(c)]
    swept = ", ".join(varying) or "none (the runs share every setting but the seed)"
    return (f"<p>{len(runs)} runs; settings that vary: <b>{html.escape(swept)}</b>; seeds: "
            f"{html.escape(seeds_text(runs))}.</p>"
            + _table(pd.DataFrame(shared, columns=["setting", "value (every run)"])))


def seed_columns(runs: pd.DataFrame) -> list[str]:
    """The seeds the runs recorded (``seed``, ``workload_seed``), in frame order."""
    return [c for c in runs.columns if is_seed(str(c)) and not str(c).startswith("cfg.")]


def seeds_text(runs: pd.DataFrame) -> str:
    """Each recorded seed's values (``seed 0, 1, 2; workload_seed 0, 1, 2``), or ``-``."""
    parts = []
    for column in seed_columns(runs):
        values = sorted({cell(v) for v in runs[column]}, key=lambda v: (len(v), v))
        parts.append(f"{column} {', '.join(values)}")
    return "; ".join(parts) or "-"


def runs_section(runs: pd.DataFrame, varying: Sequence[str]) -> str:
    keys = [c for c in [*varying, *seed_columns(runs)] if c in runs.columns]
    columns = [*keys, *[m for m in TABLE_METRICS if m in runs.columns], "run_id"]
    ordered = sort(runs, [k for k in keys])
    return _table(ordered[columns].reset_index(drop=True), "one row per run, sorted by the settings that vary")


def compare_section(runs: pd.DataFrame, compared: str, baseline: str | None,
                    note: Callable[[str], None] = print) -> tuple[str, str]:
    """The compare view (value and ratio to the baseline per group of the other settings)."""
    values = list(dict.fromkeys(runs[compared].map(cell)))
    baseline = baseline if baseline is not None else values[0]
    if baseline not in values:
        raise PlotError(f"--baseline: no run has {compared}={baseline} (values: {', '.join(values)})")
    metrics = [m for m in ("request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")
               if m in runs.columns]
    frame = runs.assign(**{compared: runs[compared].map(cell)})
    try:
        dropped = Dropped()
        groups = compare_groups(frame, compared, baseline, metrics, dropped)
    except QueryError as exc:
        raise PlotError(str(exc)) from None
    for line in dropped.lines("used"):
        note(f"compare: {line}")
    parts = [f"<p>{html.escape(compared)}, against <b>{html.escape(baseline)}</b> (ratios are value / baseline; "
             "a mean where several runs share a group: the runs column says how many (n), sd how far "
             "they scatter, ci95 the half-width of the 95% Student t interval of the mean).</p>"]
    for title, table in groups:
        parts.append(f"<h3>{html.escape(title)}</h3>" + _table(table))
    return "".join(parts), baseline


def figure_specs(runs: pd.DataFrame, varying: Sequence[str], hue: str, x: str | None,
                 metrics: Sequence[str]) -> list[PlotSpec]:
    """Each metric against ``x`` (default: the first numeric setting that varies other than the
    hue), one line per hue value, one panel per value of one more varying setting."""
    if x is None:
        numeric = [c for c in varying if c != hue and is_numeric(runs[c])]
        x = numeric[0] if numeric else hue
    rest = [c for c in varying if c not in (x, hue) and not (hue == "allocator_label" and c in
                                                             ("allocator", "reserve", "block_size", "page_bytes"))]
    facet = rest[0] if rest else None
    line_hue = None if x == hue else hue
    return [PlotSpec(x=x, y=[m], hue=line_hue, facet=facet) for m in metrics if m in runs.columns]


def figures_section(runs: pd.DataFrame, index_path: Path, specs: Sequence[PlotSpec],
                    note: Callable[[str], None] = print) -> str:
    """Each figure as kvbench-plot draws it; what kvbench-plot refuses, the report refuses (PlotError
    naming the figure), and each selected run a figure does not draw is noted, by reason."""
    parts = []
    for spec in specs:
        command = (f"kvbench-plot SOURCE --x {spec.x} --y {','.join(spec.y)}"
                   + (f" --hue {spec.hue}" if spec.hue else " --hue none")
                   + (f" --facet {spec.facet}" if spec.facet else ""))
        dropped = Dropped(len(runs))
        try:
            points = points_for(spec, runs, index_path, dropped)
        except PlotError as exc:
            raise PlotError(f"figure {','.join(spec.y)} against {spec.x}: {exc}") from None
        for line in dropped.lines():
            note(f"figure {','.join(spec.y)} against {spec.x}: {line}")
        parts.append(_figure(_png_uri(draw(points, spec, context_line(runs))), command))
    return "".join(parts) or "<p class='note'>no figure: no metric to draw</p>"


def memory_section(runs: pd.DataFrame, index_path: Path) -> str:
    """One run per allocator: its time-weighted memory breakdown (a table and stacked bars) and,
    where its steps are stored, the breakdown over time."""
    import matplotlib  # start-up time: matplotlib, only when drawing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib, only when drawing


    picked = runs.drop_duplicates("allocator_label", keep="first")
    columns = [c for c, _, _ in MEMORY if c in picked.columns]
    table = picked[["allocator_label", "run_id", *columns]].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(picked)))
    left = pd.Series(0.0, index=range(len(picked)))
    for column, name, colour in MEMORY:
        if column not in picked.columns:
            continue
        share = pd.to_numeric(picked[column], errors="coerce").fillna(0.0).reset_index(drop=True)
        ax.barh(range(len(picked)), share, left=left, color=colour, label=name)
        left += share
    ax.set_yticks(range(len(picked)), list(picked["allocator_label"].map(cell)))
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of KV cache slots (time-weighted mean over steps)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    parts = [_table(table, "the first run of each allocator in the table above"),
             _figure(_png_uri(fig), "memory breakdown, one run per allocator")]
    for row in picked.to_dict("records"):
        steps_path = Path(_absolute(row["run_dir"], index_path)) / "steps.parquet"
        if not steps_path.is_file():
            continue
        try:
            steps = pd.read_parquet(steps_path)
        except (OSError, ValueError):
            continue
        buffer_dir = Path(_tmp_dir())
        path = memory_over_time(steps, buffer_dir / f"{row['run_id']}.png", title=f"{row['allocator_label']}")
        uri = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        path.unlink(missing_ok=True)
        parts.append(_figure(uri, f"{cell(row['allocator_label'])}: memory over the run ({row['run_id']})"))
    return "".join(parts)


_TMP: list = []


def _tmp_dir() -> str:
    if not _TMP:
        _TMP.append(tempfile.TemporaryDirectory(prefix="kvbench-report-"))
    return _TMP[0].name


def cost_fit_text(runs: pd.DataFrame) -> str:
    """Each simulated GPU profile and the profile whose operator fit timed it (``cost_fit_source``),
    marked where it borrows another GPU's."""
    if not {"gpu_profile", "cost_fit_source"} <= set(runs.columns):
        return "-"
    pairs = runs[["gpu_profile", "cost_fit_source"]].dropna().drop_duplicates()
    return ", ".join(f"{gpu}: {fit}" + ("" if fit == gpu else " (borrowed: no operator fit of its own)")
                     for gpu, fit in sorted(pairs.itertuples(index=False))) or "-"


def provenance_section(runs: pd.DataFrame, source: str, argv: Sequence[str]) -> str:
    commits = runs.groupby(runs["commit"].map(cell) if "commit" in runs else pd.Series("-", index=runs.index),
                           dropna=False).size() if len(runs) else pd.Series(dtype=int)
    clean = sorted({cell(v) for v in runs["tree_clean"]}) if "tree_clean" in runs else ["-"]
    commands = []
    for overrides in runs.get("overrides", pd.Series(dtype=object)):
        try:
            listed = json.loads(overrides) if isinstance(overrides, str) else overrides
        except ValueError:
            listed = None
        if isinstance(listed, list):
            commands.append("kvbench " + " ".join(shlex.quote(str(o)) for o in listed))
    dates = sorted(str(r)[:15] for r in runs["run_id"])
    rows = [("source", source), ("report command", "kvbench-report " + " ".join(shlex.quote(a) for a in argv)),
            ("report written", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())),
            ("runs from", f"{dates[0]} to {dates[-1]} (run ids' times)" if dates else "-"),
            ("commits", ", ".join(f"{c} ({n} runs)" for c, n in commits.items()) or "-"),
            ("clean tree", ", ".join(clean)),
            ("cost-model fit", cost_fit_text(runs))]
    shown = list(dict.fromkeys(commands))
    listing = "".join(f"<li><code>{html.escape(c)}</code></li>" for c in shown[:50])
    more = f"<p class='note'>and {len(shown) - 50} more</p>" if len(shown) > 50 else ""
    return (_table(pd.DataFrame(rows, columns=["", "value"]))
            + f"<p>each run's command ({len(shown)} distinct):</p><ul>{listing}</ul>{more}")


def _note(line: str) -> None:
    print(f"kvbench-report: {line}", file=sys.stderr)


def build_html(source: str | Path, where: Sequence[str] = (), baseline: str | None = None,
               compared: str = "allocator_label", x: str | None = None,
               metrics: Sequence[str] = DEFAULT_METRICS, argv: Sequence[str] = (),
               note: Callable[[str], None] = _note) -> str:
    """The report's HTML text (nothing written); ``note`` gets one line per reason a section leaves
    selected runs out."""
    loaded = load_runs(source)
    runs = select(loaded.runs, where) if where else loaded.runs
    check_columns(runs, [compared], "--compare")
    if x is not None:
        check_columns(runs, [x], "--x")
    check_columns(runs, metrics, "--metrics")
    for metric in metrics:  # as kvbench-plot --y refuses it
        if not is_numeric(runs[metric]):
            raise PlotError(f"--metrics: {metric} is not a numeric column of the selected runs")
    varying = varying_settings(runs)
    compare_html, baseline = compare_section(runs, compared, baseline, note)
    specs = figure_specs(runs, varying, compared, x, metrics)
    bodies = {
        "settings": settings_section(runs, varying),
        "runs": runs_section(runs, varying),
        "compare": compare_html,
        "figures": figures_section(runs, loaded.index_path, specs, note),
        "memory": memory_section(runs, loaded.index_path),
        "provenance": provenance_section(runs, loaded.what, argv),
    }
    nav = "".join(f"<a href='#{key}'>{title}</a>" for key, title in SECTIONS)
    sections = "".join(f"<section id='{key}'><h2>{title}</h2>{bodies[key]}</section>" for key, title in SECTIONS)
    title = f"kvbench report: {loaded.what}"
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p class='note'>{html.escape(context_line(runs))}</p>"
            f"<nav>{nav}</nav>{sections}</body></html>\n")


def write_report(text: str, out: Path, force: bool) -> Path:
    """Write the report through the one writer (``kvbench.results.outputs``)."""
    return write_text(out, text, force=force)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="kvbench-report", description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a sweep's directory, a results folder or an index file")
    p.add_argument("--out", default="kvbench-report.html", help="the HTML file (default %(default)s)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--where", action="append", default=[], metavar="COND", help="keep runs meeting COND; repeatable")
    p.add_argument("--compare", default="allocator_label", help="the compared column (default %(default)s)")
    p.add_argument("--baseline", help="the compared value ratios are taken against (default: the first run's)")
    p.add_argument("--x", help="the figures' x axis (default: the first numeric setting that varies)")
    p.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="figures' metrics (default %(default)s)")
    return p


@command("kvbench-report")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    out = Path(args.out)
    try:
        check_target(out, force=args.force)  # before any work
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        text = build_html(args.source, args.where, args.baseline, args.compare, args.x, metrics, argv)
        write_report(text, out, args.force)
    except (PlotError, OutputError) as exc:
        print(f"kvbench-report: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvbench-report: error: --out: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        while _TMP:
            _TMP.pop().cleanup()
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
