"""``kvbench-results --compare`` (value and ratio to a baseline) and ``--export json|csv``.

``--compare allocator_label --baseline orca-oracle --metrics request_throughput,p99_ttft_ms``
groups the selected runs by the other settings that vary among them (workload, request rate,
model, ...; never the compared column, nor the allocator's own knobs when allocators are
compared), and prints, per group, each compared value's metrics and their ratio to the
baseline's (a mean where several runs share a value: the ``runs`` column says how many).

``--export json`` writes the selected summary rows as one JSON list (strict JSON: an infinite
``request_rate`` is null and named in the row's ``nonfinite`` column, as in the index);
``--export csv`` as one CSV table. Both to stdout, or atomically to ``--output FILE``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from kvbench.results.naming import cell, granularity, missing
from kvbench.results.query import QueryError
from kvbench.results.store import clean_summary

# columns that describe what a run was given (compared runs are grouped by those that vary)
SETTING_COLUMNS = ("experiment", "backend", "device", "gpu_profile", "model", "workload", "request_rate",
                   "num_requests", "kv_bytes", "seed", "n", "beam_width", "prefix_len", "system", "scheduling",
                   "batching", "preemption", "max_num_batched_tokens", "max_concurrency", "allocator_label",
                   "allocator", "reserve", "block_size", "granularity", "page_bytes")
# an allocator's own knobs: part of what is compared when allocators are
ALLOCATOR_COLUMNS = ("allocator_label", "allocator", "reserve", "block_size", "granularity", "page_bytes")
DEFAULT_METRICS = ("request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")
EXPORT_FORMATS = ("json", "csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The compare and export flags of ``kvbench-results``."""
    parser.add_argument("--compare", metavar="COL",
                        help="compare the values of COL (e.g. allocator_label) within groups of the other settings")
    parser.add_argument("--baseline", metavar="VALUE", help="--compare: the COL value ratios are taken against")
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                        help="--compare: comma-separated metrics (default: %(default)s)")
    parser.add_argument("--export", choices=EXPORT_FORMATS,
                        help="write the selected runs' summary rows (every column) as JSON or CSV")
    parser.add_argument("--output", metavar="FILE", help="--export: write to FILE instead of stdout")


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


def varying_settings(df: pd.DataFrame, compared: str) -> list[str]:
    """The setting columns, other than the compared one, that take more than one value."""
    skip = {compared, *(ALLOCATOR_COLUMNS if compared in ALLOCATOR_COLUMNS else ())}
    return [c for c in SETTING_COLUMNS
            if c in df.columns and c not in skip and df[c].astype(str).nunique() > 1]


def compare_groups(df: pd.DataFrame, compared: str, baseline: str, metrics: Sequence[str]
                   ) -> list[tuple[str, pd.DataFrame]]:
    """Per group of the other settings: one row per compared value (baseline first), with
    ``runs``, then each metric's mean and its ratio to the baseline's (``<metric>/base``)."""
    _check_columns(df, [compared, *metrics], "--compare/--metrics")
    labels = df[compared].astype(str)
    if baseline not in set(labels):
        raise QueryError(f"--baseline: no selected run has {compared}={baseline} "
                         f"(values: {', '.join(sorted(set(labels)))})")
    settings = varying_settings(df, compared)
    keys = df[settings].astype(str).agg(", ".join, axis=1) if settings else pd.Series("", index=df.index)
    groups = []
    for key in dict.fromkeys(keys):
        part = df[keys == key]
        part_labels = labels[keys == key]
        order = [baseline] + sorted(set(part_labels) - {baseline})
        base = {m: pd.to_numeric(part.loc[part_labels == baseline, m], errors="coerce").mean() for m in metrics}
        rows = []
        for value in order:
            runs = part[part_labels == value]
            if runs.empty:
                continue
            row: dict[str, object] = {compared: value, "runs": len(runs)}
            for m in metrics:
                mean = pd.to_numeric(runs[m], errors="coerce").mean()
                row[m] = mean
                row[f"{m}/base"] = mean / base[m] if base[m] and not math.isnan(base[m]) else math.nan
            rows.append(row)
        first = part.iloc[0]
        title = ", ".join(f"{s}={cell(first[s])}" for s in settings) if settings else "all selected runs"
        if baseline not in set(part_labels):
            title += f" (no {baseline} run here: no ratios)"
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
    rows = [clean_summary({k: v for k, v in row.items() if not (v is pd.NA)}) for row in df.to_dict("records")]
    return json.dumps(rows, indent=1, allow_nan=False) + "\n"


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    path = Path(output)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def compare_or_export(args: argparse.Namespace, df: pd.DataFrame) -> int:
    """Handle --compare or --export on the selected runs; the exit code."""
    if df.empty:
        print("kvbench-results: no runs match the selection", file=sys.stderr)
        return 1
    if args.export:
        try:
            _write(export_rows(df, args.export), args.output)
        except OSError as exc:
            print(f"kvbench-results: --output: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return 0
    if not args.baseline:
        raise QueryError("--compare needs --baseline VALUE (the value ratios are taken against)")
    metrics = _split(args.metrics)
    groups = compare_groups(df, args.compare, args.baseline, metrics)
    print(format_groups(groups, args.baseline, args.format), end="" if args.format == "csv" else "\n")
    return 0
