"""What ``kvbench-plot`` draws: runs from an index or a sweep dir, checked and reduced to series.

``load_runs`` reads an index file, a results folder (its ``index.jsonl``) or a sweep's directory
(the runs stored under it, from the index of the results folder above it). ``series_points``
turns the selected rows into one table of points per series (the hue value, and the metric
when several are drawn): the mean of y over the runs at each point, their spread, and how many
runs there were. Runs are averaged only when they differ in nothing but the seed
(``kvbench.results.grouping.settings_that_vary``); otherwise the one-line error names the setting.
"""
from __future__ import annotations

import difflib
import fnmatch
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kvbench.results.dropped import Dropped, usable
from kvbench.results.grouping import experiment_files, settings_that_vary, split
from kvbench.results.naming import cell
from kvbench.results.query import QueryError, in_sweep, where, with_labels
from kvbench.results.repeats import spread_of
from kvbench.results.store import load_index
from kvbench.run.sweep import _absolute

INDEX_NAME = "index.jsonl"


class PlotError(ValueError):
    """Bad input to a plot or report: one line naming the setting and what is allowed."""


@dataclass(frozen=True)
class Source:
    runs: pd.DataFrame  # one row per run (the index's columns)
    index_path: Path
    what: str  # "index <path>" or "sweep <dir>", for titles and the report


def _find_index(folder: Path) -> Path | None:
    for parent in (folder, *folder.parents):
        if (parent / INDEX_NAME).is_file():
            return parent / INDEX_NAME
    return None


def load_runs(source: str | Path) -> Source:
    """The runs of an index file, a results folder or a sweep's directory."""
    path = Path(source)
    if path.is_file():
        index, sweep = path, None
    elif path.is_dir():
        index = path / INDEX_NAME if (path / INDEX_NAME).is_file() else _find_index(path.resolve())
        sweep = None if index is not None and index.parent.resolve() == path.resolve() else path
        if index is None:
            raise PlotError(f"source: {path} is neither an index nor inside a results folder with {INDEX_NAME}")
    else:
        raise PlotError(f"source: {path} does not exist (give an index file, a results folder or a sweep dir)")
    try:
        runs = load_index(index)
    except (OSError, ValueError) as exc:
        raise PlotError(f"source: cannot read {index}: {exc}") from None
    if sweep is not None:
        runs = in_sweep(runs, index, sweep)
    if runs.empty:
        raise PlotError(f"source: no finished run in {path}")
    what = f"sweep {path}" if sweep is not None else f"index {index}"
    runs = with_labels(runs).reset_index(drop=True)
    runs["experiment_file"] = experiment_files(runs)  # two studies may share an experiment name
    return Source(runs, index, what)


def check_columns(frame: pd.DataFrame, columns: Sequence[str], flag: str) -> None:
    """Every column exists, or one line naming the close ones."""
    for column in columns:
        if column not in frame.columns:
            close = difflib.get_close_matches(column, [str(c) for c in frame.columns], n=4, cutoff=0.5)
            hint = f"; close: {', '.join(close)}" if close else "; see kvbench-results --columns"
            raise PlotError(f"{flag}: no column {column!r}{hint}")


def select(runs: pd.DataFrame, conditions: Sequence[str]) -> pd.DataFrame:
    """The rows meeting every ``--where`` condition (those of ``kvbench-results``, and
    ``COL~PATTERN``: the value matches a shell pattern, ``experiment~paper-rate-*``); an empty
    selection is an error."""
    plain = [c for c in conditions if "~" not in c.split("=", 1)[0] or "=" in c.split("~", 1)[0]]
    picked = runs
    for cond in conditions:
        if cond in plain:
            continue
        column, pattern = (part.strip() for part in cond.split("~", 1))
        check_columns(runs, [column], "--where")
        picked = picked[picked[column].map(lambda v: fnmatch.fnmatchcase(_text(v), pattern))]
    try:
        picked = where(picked, plain)
    except QueryError as exc:
        raise PlotError(str(exc)) from None
    if picked.empty:
        raise PlotError(f"--where: no run matches {' and '.join(conditions)} (of {len(runs)} runs)")
    return picked


# settings a seed can change when the command is otherwise the same: a stream of duration_s
# seconds (``workload.duration_s``) holds as many requests as its seed's arrivals draw
SEED_DRAWN = ("num_requests",)
_NOT_CONFIG = ("seed=", "results_dir=", "progress=", "hydra.")


def same_config_but_seed(runs: pd.DataFrame) -> bool:
    """Whether the runs were given the same command line, but for the seed, at the same commit."""
    if "overrides" not in runs.columns or "commit" not in runs.columns:
        return False
    commits = {str(c) for c in runs["commit"]}
    if len(commits) != 1 or runs["commit"].isna().any():
        return False

    def config(overrides: object) -> tuple[str, ...] | None:
        if isinstance(overrides, str):  # the index keeps the list as JSON text
            try:
                overrides = json.loads(overrides)
            except ValueError:
                return None
        if not isinstance(overrides, (list, tuple)):
            return None
        return tuple(sorted(o for o in map(str, overrides) if not o.lstrip("+~").startswith(_NOT_CONFIG)))

    configs = {config(o) for o in runs["overrides"]}
    return len(configs) == 1 and None not in configs


def is_setting(column: str) -> bool:
    """Whether the comparison rule counts ``column`` as a setting (asked of
    ``settings_that_vary`` itself, its only interface: two rows that differ in that column)."""
    return column != "seed" and column in settings_that_vary(pd.DataFrame({column: ["a", "b"]}))


def is_numeric(column: pd.Series) -> bool:
    values = pd.to_numeric(column.dropna(), errors="coerce")
    return len(values) > 0 and bool(values.notna().all()) and not pd.api.types.is_bool_dtype(column)


def _text(value: object) -> str:
    return cell(value)


def combine(frame: pd.DataFrame, columns: str | None, flag: str) -> tuple[pd.DataFrame, str | None, list[str]]:
    """``--hue`` or ``--facet`` of one column or several (``model,workload``: one value per
    combination, in a column of that name); the frame, the name to group by and its columns."""
    if not columns:
        return frame, None, []
    parts = [c.strip() for c in columns.split(",") if c.strip()]
    check_columns(frame, parts, flag)
    if len(parts) == 1:
        return frame, parts[0], parts
    name = ",".join(parts)
    joined = frame[parts].apply(lambda row: ", ".join(_text(v) for v in row), axis=1)
    return frame.assign(**{name: joined}), name, parts


def _by_value(frame: pd.DataFrame, columns: Sequence[str]) -> list[pd.DataFrame]:
    """The rows per distinct value of ``columns``, in order of first appearance: by value, never by
    its printed text (4e+09 and 4e+09 + 0.5 print alike and are two settings)."""
    return split(frame, list(columns)) if columns else [frame]


def series_points(frame: pd.DataFrame, x: str, ys: Sequence[str], hue: str | None, facet: str | None,
                  x_is_setting: bool, drawn_also: Sequence[str] = (), facet_metric: bool = False,
                  logx: bool = False, logy: bool = False, dropped: Dropped | None = None) -> pd.DataFrame:
    """Long table of points: facet, series, x, y mean, its spread over runs (sd, and the half-width
    of the 95% t interval of the mean), runs.
    With ``facet_metric`` each metric of ``ys`` has panels of its own.

    Runs at one point of one series are averaged only when they differ in nothing but the seed.
    With x a setting, a series has one point per x value; with x a metric (throughput against
    latency, say) each combination of the settings that vary within the series is its own point.
    A run whose x (when numeric) or y cannot be drawn (null, not finite, <= 0 on a log axis) gives
    no point; it is noted in ``dropped`` by reason (``kvbench.results.dropped``).
    """
    dropped = dropped if dropped is not None else Dropped()
    x_numeric = is_numeric(frame[x])
    drawn = [c for c in (x, hue, facet, *drawn_also) if c]
    rows = []
    groups = [c for c in (facet, hue) if c]
    for part in _by_value(frame, groups):
        named = {c: _text(part[c].iloc[0]) for c in groups}
        if x_is_setting:
            point_keys = [x]
        else:
            point_keys = settings_that_vary(part, ignore=drawn)
        for runs in _by_value(part, point_keys):
            differ = [c for c in settings_that_vary(runs, ignore=drawn)
                      if not (c in SEED_DRAWN and same_config_but_seed(runs))]
            if differ:
                where = ", ".join(f"{k}={v}" for k, v in named.items())
                at = f" at {x}={_text(runs[x].iloc[0])}" if x_is_setting else ""
                values = ", ".join(sorted({_text(v) for v in runs[differ[0]]}))
                raise PlotError(f"runs of {where or 'one series'}{at} differ in {differ[0]} ({values}); "
                                f"they are not averaged: pick one with --where, or draw it with --hue/--facet")
            x_ok = usable(runs, x, dropped, logx, "on the x axis") if x_numeric else pd.Series(True, index=runs.index)
            for y in ys:
                drawn_runs = runs[x_ok]
                drawn_runs = drawn_runs[usable(drawn_runs, y, dropped, logy)]
                yv = pd.to_numeric(drawn_runs[y], errors="coerce")
                xv = pd.to_numeric(drawn_runs[x], errors="coerce") if x_numeric else None
                if yv.empty:
                    continue
                repeat = spread_of(yv)
                series = named.get(hue, "") if hue else ""
                panel = named.get(facet, "") if facet else ""
                if facet_metric:  # a panel per metric: the series are the hue's values alone
                    panel = f"{panel}, {y}" if panel else y
                elif len(ys) > 1:
                    series = f"{series} / {y}" if series else y
                rows.append({
                    "facet": panel,
                    "series": series or y,
                    "x": float(xv.mean()) if xv is not None else _text(runs[x].iloc[0]),
                    "y": float(yv.mean()),
                    "y_sd": repeat.sd,
                    "y_ci95": repeat.half,  # y ± this: the 95% t interval of the mean (kvbench.results.repeats)
                    "runs": repeat.n,
                })
    if not rows:
        raise PlotError(f"nothing to draw: every selected run is left out ({'; '.join(dropped.reasons)})")
    return pd.DataFrame(rows)


def steps_points(runs: pd.DataFrame, index_path: Path, x: str, ys: Sequence[str], hue: str | None,
                 facet: str | None, max_points: int = 4000) -> pd.DataFrame:
    """Points from each selected run's steps (``steps.parquet``): one run per series and facet,
    never an average over runs; a long run is thinned to ``max_points`` evenly spaced steps."""
    runs, hue, hue_parts = combine(runs, hue, "--hue")
    runs, facet, facet_parts = combine(runs, facet, "--facet")
    groups = [c for c in (facet, hue) if c]
    if groups:
        counts = runs.groupby([runs[c].map(_text) for c in groups], dropna=False).size()
        crowded = counts[counts > 1]
        if len(crowded):
            key = crowded.index[0] if isinstance(crowded.index[0], tuple) else (crowded.index[0],)
            where = ", ".join(f"{c}={v}" for c, v in zip(groups, key))
            raise PlotError(f"--table steps: {crowded.iloc[0]} runs have {where}; steps are drawn run by run: "
                            "pick one with --where, or tell them apart with --hue/--facet")
    elif len(runs) > 1:
        raise PlotError(f"--table steps: {len(runs)} runs selected and no --hue; pick one with --where")
    rows = []
    for row in runs.to_dict("records"):
        path = Path(_absolute(row["run_dir"], index_path)) / "steps.parquet"
        try:
            steps = pd.read_parquet(path)
        except (OSError, ValueError) as exc:
            raise PlotError(f"--table steps: cannot read {path}: {exc}") from None
        check_columns(steps, [x, *ys], "--table steps")
        if len(steps) > max_points:
            steps = steps.iloc[:: math.ceil(len(steps) / max_points)]
        for y in ys:
            series = _text(row[hue]) if hue else ""
            if len(ys) > 1:
                series = f"{series} / {y}" if series else y
            rows.append(pd.DataFrame({"facet": _text(row[facet]) if facet else "", "series": series or y,
                                      "x": pd.to_numeric(steps[x], errors="coerce"),
                                      "y": pd.to_numeric(steps[y], errors="coerce"), "y_sd": math.nan, "y_ci95": math.nan,
                                      "runs": 1}))
    return pd.concat(rows, ignore_index=True).dropna(subset=["x", "y"])
