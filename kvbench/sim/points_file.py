"""Reading and checking a measurements CSV for ``kvbench-validate``: one clear line for a bad file.

``read_points`` reads the rows (``#`` lines are comments); ``check_points`` refuses a file with
no rows, missing columns, a count or length that is not a positive integer, a latency that is
not a positive finite number, an unknown model or GPU profile, or (for ``--fit``) fewer points
than constants to fit or a single model (leave-one-model-out needs two).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from kvbench.config.errors import CONF_DIR

COLUMNS = ("source", "model", "gpu", "count", "batch", "input_len", "output_len", "measured_ms")
INT_COLUMNS = ("count", "batch", "input_len", "output_len")


class PointsError(ValueError):
    """A measurements file that cannot be used; one line naming the file, row and column."""


def read_points(path: Path) -> list[dict]:
    if not path.is_file():
        raise PointsError(f"no measurements file {path}")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PointsError(f"{path}: not a readable CSV ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    return rows


def check_points(rows: list[dict], path: Path, models, fit_keys: int = 0) -> list[dict]:
    """The rows, each checked; raises PointsError for the first that cannot be evaluated."""
    if not rows:
        raise PointsError(f"{path}: no measurements (a header line {','.join(COLUMNS)} and one row per point)")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise PointsError(f"{path}: missing column(s) {', '.join(missing)}; the header must be {','.join(COLUMNS)}")
    gpus = {p.stem for p in (CONF_DIR / "gpu").glob("*.yaml")}
    for line, row in enumerate(rows, start=2):
        where = f"{path} row {line}"
        if any(row.get(c) in (None, "") for c in COLUMNS):
            raise PointsError(f"{where}: empty {next(c for c in COLUMNS if row.get(c) in (None, ''))}")
        if row["model"] not in models:
            raise PointsError(f"{where}: unknown model {row['model']!r}; known: {', '.join(models)}")
        if row["gpu"] not in gpus:
            raise PointsError(f"{where}: unknown gpu {row['gpu']!r}; known: {', '.join(sorted(gpus))}")
        for col in INT_COLUMNS:
            if not row[col].strip().isdigit() or int(row[col]) < 1:
                raise PointsError(f"{where}: {col} must be an integer >= 1; got {row[col]!r}")
        try:
            ms = float(row["measured_ms"])
        except ValueError:
            ms = float("nan")
        if not math.isfinite(ms) or ms <= 0:
            raise PointsError(f"{where}: measured_ms must be a finite number > 0; got {row['measured_ms']!r}")
    if fit_keys:
        if len(rows) <= fit_keys:
            raise PointsError(f"{path}: --fit needs more points than the {fit_keys} constants it fits; got {len(rows)}")
        if len({r["model"] for r in rows}) < 2:
            raise PointsError(f"{path}: --fit needs points of two models at least (it holds one model out)")
    return rows
