"""``kvbench-results --compare`` (value and ratio to a baseline) and ``--export json|csv``.

``--compare allocator_label --baseline orca-oracle --metrics request_throughput,p99_ttft_ms``
groups the selected runs by the other settings that vary among them (workload, request rate,
model, ...; never the compared column, nor the allocator's own knobs when allocators are
compared), and prints, per group, each compared value's metrics and their ratio to the
baseline's (a mean where several runs share a value: the ``runs`` column says how many, ``sd``
and ``ci95`` how far they scatter: mean ± ci95 is the 95% Student t interval of the mean).

``--export json`` writes the selected summary rows as one JSON list (strict JSON: an infinite
``request_rate`` is null and named in the row's ``nonfinite`` column, as in the index);
``--export csv`` as one CSV table. Both to stdout, or atomically to ``--output FILE``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from kvbench.results.dropped import Dropped
from kvbench.results.grouping import (distinct_settings, group_keys, numeric_metric, settings_that_vary, split,
                                      value_key)
from kvbench.results.naming import cell, granularity, missing
from kvbench.results.outputs import OutputError, write_text
from kvbench.results.query import QueryError
from kvbench.results.repeats import spread_of
from kvbench.results.settings import KEYS_COLUMN, PREFIX
from kvbench.results.store import clean_summary

# an allocator's own knobs: part of what is compared when allocators are
ALLOCATOR_COLUMNS = ("allocator_label", "allocator", "reserve", "block_size", "granularity", "page_bytes",
                     "tokens_per_page")
# the config group a compared summary column names (its recorded cfg.<group>.* leaves are its knobs)
CONFIG_GROUP_OF = {"model": "model", "workload": "workload", "gpu_profile": "gpu", "backend": "backend",
                   "system": "system", "offload": "offload"}
DEFAULT_METRICS = ("request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")
EXPORT_FORMATS = ("json", "csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The compare and export flags of ``kvbench-results``."""
    parser.add_argument("--compare", metavar="COL",
                        help="compare the values of COL (e.g. allocator_label) within groups of the other settings")
    parser.add_argument("--baseline", metavar="VALUE", help="--compare: the COL value ratios are taken against")
    parser.add_argument("--metrics", default=None,
                        help=f"--compare: comma-separated metrics (default: {','.join(DEFAULT_METRICS)})")
    parser.add_argument("--export", choices=EXPORT_FORMATS,
                        help="write the selected runs' summary rows (every column) as JSON or CSV")
    parser.add_argument("--output", metavar="FILE",
                        help="--compare/--export: write to FILE instead of stdout (a new file, or an existing "
                             "regular one with --force; never a link, a folder, the index or a run's file)")
    parser.add_argument("--force", action="store_true", help="--output: replace FILE if it exists")


def check_modes(args: argparse.Namespace) -> None:
    """QueryError for a flag that does nothing in the mode used (one line naming it)."""
    maintaining = [f for f, on in (("--reindex", args.reindex), ("--clean", args.clean)) if on]
    if maintaining:
        used = [f for f, on in (("--compare", args.compare), ("--export", args.export), ("--output", args.output),
                                ("--baseline", args.baseline), ("--metrics", args.metrics),
                                ("--force", args.force or None)) if on is not None]
        if used:
            raise QueryError(f"{used[0]} does nothing with {maintaining[0]} (which only rebuilds or cleans); "
                             "run them separately")
        return
    if args.compare is not None and args.export is not None:
        raise QueryError("--compare and --export are two modes; use one")
    if args.export is not None and args.format is not None:
        raise QueryError(f"--format does nothing with --export (--export {args.export} is the format)")
    if args.compare is None:
        for flag, value in (("--baseline", args.baseline), ("--metrics", args.metrics)):
            if value is not None:
                raise QueryError(f"{flag} works with --compare only (it does nothing here)")
        if args.output is not None and args.export is None:
            raise QueryError("--output works with --compare or --export only (it does nothing here)")
    if args.force and args.output is None:
        raise QueryError("--force works with --output only (it does nothing here)")


def with_granularity(df: pd.DataFrame) -> pd.DataFrame:
    """A ``granularity`` column for every row (rows written before it existed get it derived)."""
    out = df.copy()
    derived = [granularity(row) for row in out.to_dict("records")]
    if "granularity" not in out:
        out["granularity"] = derived
    else:
        out["granularity"] = [d if missing(v) else v for v, d in zip(out["granularity"], derived)]
    return out


def check_sweep_dir(index_path: Path, sweep: Path, selected: pd.DataFrame) -> None:
    """A ``--sweep`` that selects nothing and names no directory (the README's ``<sweep dir>``
    placeholder, a typo) is an error naming the sweeps that exist, never an empty selection."""
    if len(selected) or sweep.is_dir():
        return
    parent = sweep.parent if sweep.parent.is_dir() else None
    found = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent is not None else []
    hint = f"; sweeps in {parent}: {', '.join(found[-5:])}" if found else ""
    what = "is a placeholder: put a sweep's directory there" if "<" in str(sweep) else "is not a directory"
    raise QueryError(f"--sweep: {sweep} {what}{hint}")


def note_all_null_sort(df: pd.DataFrame, keys: Sequence[str]) -> None:
    """Say so on stderr when a --sort column is null for every selected run (it orders nothing)."""
    for key in keys:
        column = key.lstrip("-")
        if column in df.columns and len(df) and df[column].isna().all():
            print(f"kvbench-results: --sort: {column} is null (not applicable) for every selected run; "
                  "it does not order them", file=sys.stderr)


def _split(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def _check_columns(df: pd.DataFrame, columns: Sequence[str], flag: str) -> None:
    unknown = [c for c in columns if c not in df.columns]
    if unknown:
        raise QueryError(f"{flag}: unknown column(s) {', '.join(unknown)}")


def value_text(value: object) -> str:
    """A compared value as the user writes it: ``null`` for not set, 4 for 4.0, true/false."""
    key = value_key(value)
    if key is None:
        return "null"
    kind, raw = key
    if kind == "bool":
        return "true" if raw else "false"
    if kind == "num":
        return str(int(raw)) if math.isfinite(raw) and raw == int(raw) else f"{raw:g}"
    return str(value)


_NULL_WORDS = ("null", "none", "-", "")


def _matches_baseline(text: pd.Series, baseline: str) -> pd.Series:
    if baseline.strip().lower() in _NULL_WORDS:
        return text == "null"
    try:
        number = float(baseline)
    except ValueError:
        return text == baseline
    return text.map(lambda t: t == baseline or _same_number(t, number))


def _same_number(text: str, number: float) -> bool:
    try:
        return float(text) == number
    except ValueError:
        return False


def _knob_label(value: str, knobs: dict[str, object]) -> str:
    return f"{value} ({', '.join(f'{k}={value_text(v)}' for k, v in knobs.items())})" if knobs else value


def _config_group(compared: str) -> str | None:
    """The config group whose knobs the compared column names (allocator_label: allocator), or None."""
    if compared in ALLOCATOR_COLUMNS:
        return "allocator"
    if compared.startswith(PREFIX):
        return compared[len(PREFIX):].split(".", 1)[0]
    return CONFIG_GROUP_OF.get(compared)


def follows(compared: str, column: str) -> bool:
    """Whether ``column`` is a knob of what ``compared`` names (an allocator's own knobs and recorded
    ``cfg.allocator.*`` leaves when allocators are compared): it labels rows, never makes a group."""
    group = _config_group(compared)
    if group is None:
        return False
    return (column.startswith(f"{PREFIX}{group}.") or column == KEYS_COLUMN
            or (group == "allocator" and column in ALLOCATOR_COLUMNS))


def _row_knobs(df: pd.DataFrame, compared: str, labels: pd.Series, varying: list[str]) -> tuple[list[str], list[str]]:
    """Split the settings that vary (other than the compared one) into group keys and the knobs of
    the compared thing that go into a row's label (they vary among runs of one compared value);
    recorded leaves that split nothing further are left out (``distinct_settings``)."""
    group_by, in_label = [], []
    for column in varying:
        if follows(compared, column):
            if any(settings_that_vary(df[labels == value][[column]]) for value in dict.fromkeys(labels)):
                in_label.append(column)
            continue  # follows the compared value: not a group of its own
        group_by.append(column)
    return distinct_settings(df, group_by), distinct_settings(df, in_label, given=[compared])


def _label_knobs(df: pd.DataFrame, text: pd.Series, value: str, in_label: list[str]) -> list[str]:
    """The knobs that vary among runs of one compared value (granularity only when it alone does)."""
    rows = df[text == value]
    knobs = [k for k in in_label if settings_that_vary(rows[[k]])]
    return [k for k in knobs if k != "granularity"] if len(knobs) > 1 else knobs


def compare_groups(df: pd.DataFrame, compared: str, baseline: str, metrics: Sequence[str],
                   dropped: Dropped | None = None) -> list[tuple[str, pd.DataFrame]]:
    """Per group of the other settings that vary: one row per compared value (baseline first),
    each averaging only runs whose every setting but the seed is equal (``runs`` says how many,
    ``<metric> sd`` and ``<metric> ci95`` their spread and the half-width of the 95% t interval of
    the mean when any row averages several); a setting that varies among runs
    of one compared value splits them into rows labelled with it (``paged (block_size=32)``).
    ``<metric>/base`` is the ratio to the baseline row of the same group. A run whose metric is
    null is left out of that metric's means and noted in ``dropped``."""
    _check_columns(df, [compared, *metrics], "--compare/--metrics")
    values = {m: numeric_metric(df, m) for m in metrics}
    if dropped is not None:
        dropped.total = len(df)
        for m in metrics:
            dropped.add(f"{m} is null (not applicable)", df.index[values[m].isna()])
    text = df[compared].map(value_text)
    is_base = _matches_baseline(text, baseline)
    if not is_base.any():
        raise QueryError(f"--baseline: no selected run has {compared}={baseline} "
                         f"(values: {', '.join(sorted(set(text)))})")
    base_text = text[is_base].iloc[0]
    varying = settings_that_vary(df, ignore=[compared])
    group_by, in_label = _row_knobs(df, compared, text, varying)
    several = any(len(part) > 1 for part in split(df, [compared, *group_by, *in_label]))
    groups = []
    for part in split(df, group_by):
        rows_of = split(part, [compared, *in_label])
        order = sorted(rows_of, key=lambda rows: (text[rows.index[0]] != base_text, text[rows.index[0]],
                                                  str(group_keys(rows, in_label).iloc[0])))
        bases = [rows for rows in order if text[rows.index[0]] == base_text]
        base = {m: values[m][bases[0].index].mean() for m in metrics} if len(bases) == 1 else None
        rows = []
        for runs in order:
            first = runs.iloc[0]
            label = _knob_label(text[runs.index[0]], {k: first[k] for k in _label_knobs(df, text, text[runs.index[0]],
                                                                                       in_label)})
            row: dict[str, object] = {compared: label, "runs": len(runs)}
            for m in metrics:
                mean = values[m][runs.index].mean()
                row[m] = mean
                if several:
                    repeat = spread_of(values[m][runs.index])
                    row[f"{m} sd"] = repeat.sd
                    row[f"{m} ci95"] = repeat.half  # mean ± this: the 95% t interval (kvbench.results.repeats)
                ratio = math.nan
                if base is not None and base[m] and not math.isnan(base[m]):
                    ratio = float(mean) / float(base[m])  # inf / inf is nan, without numpy's warning line
                row[f"{m}/base"] = ratio
            rows.append(row)
        first = part.iloc[0]
        title = ", ".join(f"{s}={'null' if missing(first[s]) else cell(first[s])}" for s in group_by) if group_by else "all selected runs"
        if not bases:
            title += f" (no {baseline} run here: no ratios)"
        elif len(bases) > 1:
            title += f" ({len(bases)} {baseline} rows differ in {', '.join(in_label)}: no ratios)"
        groups.append((title, pd.DataFrame(rows)))
    return groups


def _ratio(value: object) -> str:
    return "-" if missing(value) else f"{float(value):.3f}x"


def format_groups(groups: Sequence[tuple[str, pd.DataFrame]], baseline: str, fmt: str) -> str:
    """The compare view as text tables, markdown sections or one long CSV."""
    if fmt == "csv":
        long = [frame.assign(group=title) for title, frame in groups]
        return pd.concat(long, ignore_index=True).to_csv(index=False)
    blocks = []
    for title, frame in groups:
        cells = pd.DataFrame({c: frame[c].map(_ratio if c.endswith("/base") else cell) for c in frame.columns})
        cells.columns = [f"x {baseline}" if c.endswith("/base") else c for c in frame.columns]
        if fmt == "markdown":
            head = "| " + " | ".join(cells.columns) + " |"
            rule = "| " + " | ".join("---" for _ in cells.columns) + " |"
            body = ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]
            blocks.append("\n".join([f"### {title}", "", head, rule, *body]))
        else:
            blocks.append(f"== {title} ==\n{cells.to_string(index=False)}")
    return "\n\n".join(blocks)


def export_rows(df: pd.DataFrame, fmt: str) -> str:
    """The selected rows as strict JSON (a list of summary rows) or CSV."""
    if fmt == "csv":
        return df.to_csv(index=False)
    rows = [_export_row(row) for row in df.to_dict("records")]
    return json.dumps(rows, indent=1, allow_nan=False) + "\n"


def _export_row(row: dict) -> dict:
    """One summary row as strict JSON: a nested value (a list or an object some writer put in a
    summary) is exported as it is, as JSON holds it; infinities go to the ``nonfinite`` column."""
    flat, nested = {}, {}
    for key, value in row.items():
        if value is pd.NA:
            continue
        (nested if isinstance(value, (list, dict, tuple)) else flat)[key] = value
    out = clean_summary(flat)
    out.update((key, _strict(value)) for key, value in nested.items())
    return out


def _strict(value: object) -> object:
    """A nested value with every NaN or infinity as null and numpy scalars as Python ones."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def compare_or_export(args: argparse.Namespace, df: pd.DataFrame) -> int:
    """Handle --compare or --export on the selected runs; the exit code."""
    if df.empty:
        print("kvbench-results: no runs match the selection", file=sys.stderr)
        return 1
    if args.export:
        text = export_rows(df, args.export)
    else:
        if args.baseline is None:
            raise QueryError("--compare needs --baseline VALUE (the value ratios are taken against)")
        metrics = _split(args.metrics if args.metrics is not None else ",".join(DEFAULT_METRICS))
        if not metrics:
            raise QueryError(f"--metrics: {args.metrics!r} names no metric")
        fmt = args.format or "table"
        dropped = Dropped()
        groups = compare_groups(df, args.compare, args.baseline, metrics, dropped)
        dropped.say("kvbench-results", verb="used")
        text = format_groups(groups, args.baseline, fmt)
        text += "" if fmt == "csv" else "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_text(args.output, text, force=args.force, flag="--output")
    except OutputError as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvbench-results: --output: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
