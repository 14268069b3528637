"""Row selection for ``kvbench-results``: ``--where``, ``--sort``, ``--sweep`` and the label fill."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

_WHERE = re.compile(r"^\s*([\w.]+)\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


class QueryError(ValueError):
    """A malformed --where or --sort, or an unknown column; one line."""


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """``allocator_label`` for every row (older rows lack it: derived from allocator and reserve)."""
    from kvbench.naming import allocator_label, missing

    out = df.copy()
    derived = [allocator_label(str(a), r) for a, r in zip(out["allocator"], out["reserve"])]
    if "allocator_label" not in out:
        out["allocator_label"] = derived
    else:
        out["allocator_label"] = [d if missing(v) else v for v, d in zip(out["allocator_label"], derived)]
    return out


def _known(df: pd.DataFrame, column: str, flag: str) -> None:
    if column not in df.columns:
        raise QueryError(f"{flag}: unknown column {column!r}")


def where(df: pd.DataFrame, conditions: Sequence[str]) -> pd.DataFrame:
    """Keep rows meeting every ``COL=V``, ``COL!=V``, ``COL>V`` (``<``, ``>=``, ``<=``)."""
    keep = pd.Series(True, index=df.index)
    for cond in conditions:
        match = _WHERE.match(cond)
        if not match:
            raise QueryError(f"--where: {cond!r} is not COLUMN OP VALUE (OP one of = != > < >= <=)")
        column, op, raw = match.groups()
        _known(df, column, "--where")
        col = df[column]
        numeric = pd.api.types.is_numeric_dtype(col)
        try:
            value = float(raw) if numeric else raw
        except ValueError:
            raise QueryError(f"--where: {column} is numeric; {raw!r} is not a number") from None
        text = col if numeric else col.astype(str)
        if op in ("=", "=="):
            hit = text == value
        elif op == "!=":
            hit = text != value
        else:
            if not numeric:
                raise QueryError(f"--where: {column} is not numeric; use = or !=")
            hit = {">": col > value, "<": col < value, ">=": col >= value, "<=": col <= value}[op]
        keep &= hit.fillna(False).astype(bool)
    return df[keep]


def sort(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Sort by columns in order; ``-COL`` sorts that column descending."""
    if not keys:
        return df
    columns = [k.lstrip("-") for k in keys]
    for column in columns:
        _known(df, column, "--sort")
    return df.sort_values(columns, ascending=[not k.startswith("-") for k in keys], kind="stable",
                          na_position="last")


def in_sweep(df: pd.DataFrame, index_path: Path, sweep_dir: Path) -> pd.DataFrame:
    """Rows of runs stored under a sweep's directory (``results/runs/<experiment>/<sweep>``)."""
    base, sweep = index_path.parent.resolve(), sweep_dir.resolve()

    def inside(run_dir: object) -> bool:
        path = Path(str(run_dir))
        path = (path if path.is_absolute() else base / path).resolve()
        return path == sweep or sweep in path.parents

    return df[df["run_dir"].map(inside)]
