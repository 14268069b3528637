"""The results store: one directory per run plus a shared, append-only index.

A run directory holds ``summary.json`` (one flat row), ``steps.parquet`` (one row per engine
step) and ``requests.parquet`` (one row per request). Each file is written to a temporary name
in the same directory and renamed into place, so an interrupted run leaves either the old file
or the new one, never half of one. ``summary.json`` is written last: its presence marks a
complete run.

A run is finished when its ``summary.json`` exists; a run directory without one (a run killed
outright, leftover ``*.tmp`` files) is unfinished: readers ignore it, ``kvbench-results --clean``
removes it once no live process holds its ``.running`` lock and only if kvbench made it
(``kvbench/results/reindex.py``, ``kvbench/run/rundir.py``).

Strict JSON: ``summary.json`` and index rows never hold NaN or Infinity. NaN is written as null;
an infinite value (a burst workload's ``request_rate``) is written as null and named in the
row's ``nonfinite`` column as ``key=inf`` (comma-separated when several), so jq, duckdb and
pandas read every line; ``load_index`` and ``load_summary`` put the infinities back.

The index (``results/index.jsonl``) holds one JSON object per line, one line per finished run.
Runs append to it under an exclusive ``fcntl.flock`` on a sibling lock file, so concurrent jobs
(joblib processes, submitit tasks on a shared file system with working locks) can share it; it
is never rewritten except by ``kvbench-results --reindex``, which rebuilds it from the finished
run directories under ``runs/`` and keeps the rows of finished runs stored elsewhere (a lost or
damaged index). Readers also list the finished runs under ``runs/`` that lack a row (a kill
between ``summary.json`` and the append). An append that fails (a full disk, in the write or the
fsync) is cut back to the old size, so a line is whole or absent. A run that is repeated under
the same ``run_id`` appends a new line, and readers keep the last one.

``kvbench-results`` (``kvbench/results/cli.py``) prints a comparison table from the index.
"""
from __future__ import annotations

import fcntl
import json
import math
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kvbench.run.rundir import RUNNING_FILE

# The design's summary columns, in order (design.md, "Results schema").
SUMMARY_COLUMNS: tuple[str, ...] = (
    # identity
    "run_id", "experiment", "allocator", "reserve", "block_size", "backend", "device",
    "gpu_profile", "model", "workload", "request_rate", "num_requests", "kv_slots", "kv_bytes",
    "seed",
    # throughput
    "duration_s", "request_throughput", "output_token_throughput", "total_token_throughput",
    # latency (seconds)
    "mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s",
    "normalized_latency_s",
    # batching
    "mean_batch_size", "max_batch_size",
    # memory
    "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac",
    # pressure and sharing
    "num_preemptions", "prefix_hit_rate", "sharing_saving_frac",
    # outcome
    "num_finished", "num_rejected",
)  # fmt: skip

MEM_COLUMNS: tuple[str, ...] = (
    "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac",
)  # fmt: skip

# Integer columns: read back as nullable Int64 so a null does not turn them into floats.
INTEGER_COLUMNS: tuple[str, ...] = (
    "block_size", "num_requests", "kv_slots", "kv_bytes", "seed", "workload_seed", "max_batch_size",
    "num_preemptions", "num_finished", "num_rejected",
)  # fmt: skip

DEFAULT_INDEX = Path("results/index.jsonl")
SUMMARY_FILE = "summary.json"
STEPS_FILE = "steps.parquet"
REQUESTS_FILE = "requests.parquet"
RUN_DIR_COLUMN = "run_dir"  # added to each index row: where the run's files are

DEFAULT_COMPARE_COLUMNS: tuple[str, ...] = (
    "allocator_label", "reserve", "block_size", "workload", "request_rate", "mean_batch_size",
    "request_throughput", "normalized_latency_s", *MEM_COLUMNS, "num_preemptions",
)  # fmt: skip


# ----------------------------------------------------------------------------- writing


def clean_summary(summary: Mapping[str, object]) -> dict[str, object]:
    """Return the summary as a JSON-safe flat row: design columns first, in order, then extras.

    Missing design columns become None (null), never 0. numpy scalars become Python scalars;
    any other value that is not None, bool, int, float or str (a list, a dict, a timestamp)
    raises TypeError naming the key. NaN becomes None; an infinity stays (a burst workload's
    request_rate is inf) and is written as ``Infinity``, the JSON extension that Python's json
    and pandas read back.
    """
    for key in summary:
        if not isinstance(key, str):
            raise TypeError(f"summary key {key!r} is not a string")
    row = {col: _clean_value(col, summary.get(col)) for col in SUMMARY_COLUMNS}
    for key, value in summary.items():
        if key not in row and key != NONFINITE_COLUMN:
            row[key] = _clean_value(key, value)
    return _encode_nonfinite(row)


NONFINITE_COLUMN = "nonfinite"


def _encode_nonfinite(row: dict[str, object]) -> dict[str, object]:
    """Infinities become null, named in the ``nonfinite`` column (strict JSON)."""
    named = [f"{k}={'inf' if v > 0 else '-inf'}" for k, v in row.items() if isinstance(v, float) and math.isinf(v)]
    if not named:
        return row
    out = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()}
    out[NONFINITE_COLUMN] = ",".join(named)
    return out


class NonfiniteError(ValueError):
    """A ``nonfinite`` field that is not ``KEY=inf``/``KEY=-inf`` items (a hand-edited row)."""


_NONFINITE_VALUES = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
                     "-infinity": -math.inf, "nan": math.nan}


def decode_nonfinite(row: dict[str, object]) -> dict[str, object]:
    """Put back the infinities that ``nonfinite`` names (the inverse of the writer's encoding).

    An empty or null field names nothing (dropped). Anything else that is not comma-separated
    ``KEY=inf`` / ``KEY=-inf`` items naming a null column raises NonfiniteError (one line)."""
    if NONFINITE_COLUMN not in row:
        return row
    named = row[NONFINITE_COLUMN]
    out = {k: v for k, v in row.items() if k != NONFINITE_COLUMN}
    if named is None or named == "":
        return out
    if not isinstance(named, str):
        raise NonfiniteError(f"nonfinite field {named!r} is not a string of KEY=inf items")
    for item in named.split(","):
        key, sep, value = item.strip().partition("=")
        number = _NONFINITE_VALUES.get(value.strip().lower())
        if not sep or not key or number is None:
            raise NonfiniteError(f"nonfinite field {named!r}: {item!r} is not KEY=inf or KEY=-inf")
        if out.get(key) is not None:
            raise NonfiniteError(f"nonfinite field {named!r}: {key} holds {out[key]!r}, not null")
        out[key] = number
    return out


def _clean_value(key: str, value: object) -> object:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, np.generic):  # numpy scalar, including np.bool_ and np.str_
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return None if math.isnan(value) else value
    if isinstance(value, str):  # np.str_ after .item()
        return value
    if value is pd.NA or value is pd.NaT:
        return None
    raise TypeError(
        f"summary[{key!r}] has type {type(value).__name__}; "
        "allowed: None, bool, int, float, str (flatten or stringify it)"
    )


def write_run(
    run_dir: str | os.PathLike,
    summary: Mapping[str, object],
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    index_path: str | os.PathLike = DEFAULT_INDEX,
) -> Path:
    """Write one run's files into ``run_dir`` and append its row to the index; return run_dir.

    Validation (summary types, a non-empty ``run_id``, DataFrame inputs) happens before
    anything is written. Files are written atomically, ``summary.json`` last; the index row is
    appended only after all three files are in place.
    """
    row = clean_summary(summary)
    if not row["run_id"]:
        raise ValueError("summary['run_id'] is required (the index keys runs by it)")
    for name, frame in (("steps", steps), ("requests", requests)):
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / STEPS_FILE, lambda f: steps.to_parquet(f, index=False))
    atomic_write(run_dir / REQUESTS_FILE, lambda f: requests.to_parquet(f, index=False))
    text = json.dumps(row, indent=1, allow_nan=False) + "\n"
    atomic_write(run_dir / SUMMARY_FILE, lambda f: f.write(text.encode()))

    index_path = Path(index_path)
    append_index_row(index_path, {**row, RUN_DIR_COLUMN: run_dir_for_index(run_dir, index_path)})
    return run_dir


def atomic_write(path: Path, write) -> None:
    """Call write(binary file) on a temporary file next to path, fsync it, rename onto path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def run_dir_for_index(run_dir: Path, index_path: Path) -> str:
    """run_dir relative to the index's folder when it lies inside it, else absolute."""
    run_abs = run_dir.resolve()
    base = index_path.parent.resolve()
    try:
        return run_abs.relative_to(base).as_posix()
    except ValueError:
        return run_abs.as_posix()


def append_index_row(index_path: str | os.PathLike, row: Mapping[str, object]) -> None:
    """Append one JSON line to the index under an exclusive lock on ``<index>.lock``.

    All or nothing: the line goes out through unbuffered ``os.write`` calls and is fsynced; if
    any of them fails (a full disk fails inside the write, not only in fsync) the file is cut back
    to its old size before the error propagates. If the file does not end in a newline (a writer
    killed mid-line), a newline is written first so the torn line stays alone on its line and
    readers skip it; the existing bytes are never changed.
    """
    index_path = Path(index_path)
    index_path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(dict(row), allow_nan=False) + "\n").encode()
    lock_path = index_path.with_name(index_path.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            fd = os.open(index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                end = os.lseek(fd, 0, os.SEEK_END)
                if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                    line = b"\n" + line
                try:
                    _write_all(fd, line)
                    os.fsync(fd)
                except BaseException:
                    os.ftruncate(fd, end)  # never leave a torn line behind
                    raise
            finally:
                os.close(fd)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ----------------------------------------------------------------------------- reading


class IndexLineError(ValueError):
    """An index line that is a JSON object yet cannot be read as a row (a bad ``nonfinite`` field)."""


def load_index(path: str | os.PathLike = DEFAULT_INDEX, dedupe: bool = True, unindexed: bool = True) -> pd.DataFrame:
    """Read the index as one row per run, SUMMARY_COLUMNS first, then run_dir and extras.

    With ``unindexed`` the finished runs under ``<index folder>/runs`` that lack a row (a run
    killed between its summary.json and its row) are read from their summaries and added last.

    Integer columns (INTEGER_COLUMNS) come back as nullable ``Int64``; others as pandas infers.

    With ``dedupe`` a run_id that appears more than once keeps its last row. Lines that are
    not JSON objects are skipped: silently for the last line (a write cut short), with a
    warning elsewhere. A missing file raises FileNotFoundError.
    """
    path = Path(path)
    missing = False
    try:
        lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        if not unindexed or not (path.parent / "runs").is_dir():
            raise
        lines, missing = [], True  # no row appended yet: the finished run dirs alone
    rows: list[dict] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            if i != last:
                warnings.warn(f"{path}:{i + 1}: skipping a line that is not a JSON object")
            continue
        try:
            rows.append(decode_nonfinite(obj))
        except NonfiniteError as exc:
            raise IndexLineError(f"{path}:{i + 1}: {exc} (fix or remove that row)") from None
    if unindexed:
        rows += [decode_nonfinite(row) for row in unindexed_rows(path, rows)]
        if missing and not rows:
            raise FileNotFoundError(f"no index at {path} and no finished run under {path.parent / 'runs'}")

    extras: dict[str, None] = {}
    for obj in rows:
        extras.update((k, None) for k in obj if k not in extras)
    fixed = [*SUMMARY_COLUMNS, RUN_DIR_COLUMN]
    columns = fixed + [k for k in extras if k not in fixed]
    df = pd.DataFrame.from_records(rows, columns=columns)
    for col in INTEGER_COLUMNS:
        if col not in df.columns:  # workload_seed: not in rows written before issue 53
            continue
        try:
            df[col] = df[col].astype("Int64")
        except (TypeError, ValueError):  # a non-integer value: leave the column as it is
            pass
    if dedupe and len(df):
        df = df.drop_duplicates("run_id", keep="last").reset_index(drop=True)
    return df


def run_dir_of(run: str | os.PathLike, index: str | os.PathLike = DEFAULT_INDEX) -> Path:
    """A run's directory: ``run`` itself if it is a run directory, else its run_id's row."""
    candidate = Path(run)
    if (candidate / SUMMARY_FILE).is_file() or (candidate / STEPS_FILE).is_file():
        return candidate
    if isinstance(run, os.PathLike):
        raise FileNotFoundError(f"{run} is not a run directory (no {SUMMARY_FILE})")
    index = Path(index)
    df = load_index(index)
    match = df.loc[df["run_id"] == run, RUN_DIR_COLUMN]
    if match.empty:
        raise KeyError(f"run {run!r} is neither a run directory nor a run_id in {index}")
    run_dir = Path(match.iloc[-1])
    return run_dir if run_dir.is_absolute() else index.parent / run_dir


def load_summary(run: str | os.PathLike, index: str | os.PathLike = DEFAULT_INDEX) -> dict:
    """A run's summary.json as a dict (run is a run_id or a run directory)."""
    return decode_nonfinite(json.loads((run_dir_of(run, index) / SUMMARY_FILE).read_text()))


def load_steps(run: str | os.PathLike, index: str | os.PathLike = DEFAULT_INDEX) -> pd.DataFrame:
    """A run's per-step table (run is a run_id or a run directory)."""
    return pd.read_parquet(run_dir_of(run, index) / STEPS_FILE)


def load_requests(
    run: str | os.PathLike, index: str | os.PathLike = DEFAULT_INDEX
) -> pd.DataFrame:
    """A run's per-request table (run is a run_id or a run directory)."""
    return pd.read_parquet(run_dir_of(run, index) / REQUESTS_FILE)


def compare(
    df: pd.DataFrame, columns: Sequence[str], by: Sequence[str] = ("experiment",)
) -> pd.DataFrame:
    """The ``by`` columns then ``columns``, rows sorted by ``by`` (stable: index order within).

    One row per run; nothing is aggregated. Raises KeyError listing unknown columns.
    """
    wanted = list(dict.fromkeys([*by, *columns]))
    unknown = [c for c in wanted if c not in df.columns]
    if unknown:
        raise KeyError(f"unknown column(s): {', '.join(unknown)}")
    out = df[wanted]
    if by:
        out = out.sort_values(list(by), kind="stable", na_position="last")
    return out.reset_index(drop=True)


# ----------------------------------------------------------------------------- finished runs under runs/


class ResultsError(ValueError):
    """A results folder or index that cannot be read or rebuilt; one line."""


def run_dirs(runs: Path) -> tuple[list[Path], list[Path]]:
    """(finished run dirs, unfinished ones) under ``runs``: a run dir has ``.hydra/``, a
    ``.running`` record or a summary."""
    finished, unfinished = [], []
    for dirpath, dirnames, filenames in os.walk(runs):
        folder = Path(dirpath)
        if SUMMARY_FILE in filenames:
            finished.append(folder)
            dirnames.clear()
        elif ".hydra" in dirnames or RUNNING_FILE in filenames:
            unfinished.append(folder)
            dirnames.clear()
    return sorted(finished), sorted(unfinished)


def summary_row(folder: Path, index_path: Path) -> dict:
    """The index row of a finished run dir, from its summary.json; ResultsError if unreadable."""
    try:
        row = json.loads((folder / SUMMARY_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{folder / SUMMARY_FILE}: unreadable ({exc})") from None
    if not isinstance(row, dict) or not isinstance(row.get("run_id"), str) or not row["run_id"]:
        raise ResultsError(f"{folder / SUMMARY_FILE}: not a summary (a JSON object with a run_id)")
    try:
        row = clean_summary(decode_nonfinite(row))
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{folder / SUMMARY_FILE}: {exc}") from None
    return {**row, RUN_DIR_COLUMN: run_dir_for_index(folder, index_path)}


def unindexed_rows(index_path: Path, rows: list[dict]) -> list[dict]:
    """Rows for the finished runs under ``<index folder>/runs`` that ``rows`` lack (by run dir and
    run_id), oldest summary first; unreadable summaries are left out."""
    runs = index_path.parent / "runs"
    if not runs.is_dir():
        return []
    dirs = {str(r.get(RUN_DIR_COLUMN)) for r in rows}
    ids = {r.get("run_id") for r in rows}
    found = []
    for folder in run_dirs(runs)[0]:  # the cheap checks first: no path is resolved for a run with a row
        if folder.name in ids or folder.relative_to(index_path.parent).as_posix() in dirs:
            continue
        try:
            row = summary_row(folder, index_path)
        except ResultsError:
            continue
        if row["run_id"] not in ids:
            found.append(((folder / SUMMARY_FILE).stat().st_mtime, row))
    return [row for _, row in sorted(found, key=lambda item: item[0])]
