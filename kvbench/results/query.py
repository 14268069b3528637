"""Row selection for ``kvbench-results``: ``--where``, ``--sort``, ``--sweep`` and the label fill."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from kvbench.cli import number
from kvbench.results.naming import allocator_label, missing

_WHERE = re.compile(r"^\s*([\w.]+)\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


class QueryError(ValueError):
    """A malformed --where or --sort, or an unknown column; one line."""


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """``allocator_label`` for every row: older rows lack it (derived from allocator, reserve and
    page size); a label that names a config whose page size the run did not use (a run of
    ``vattention-64k`` with ``allocator.page_bytes=2097152``, written before labels checked it) is
    replaced by the one its knobs give."""
    out = df.copy()
    pages = out["page_bytes"] if "page_bytes" in out else pd.Series(None, index=out.index, dtype=object)
    rows = list(zip(out["allocator"], out["reserve"], pages))
    derived = [allocator_label(str(a), r) for a, r, _ in rows]
    if "allocator_label" not in out:
        out["allocator_label"] = derived
        return out
    labels = []
    for value, fallback, (name, reserve, page) in zip(out["allocator_label"], derived, rows):
        if missing(value):
            labels.append(fallback)
        elif str(value).startswith("vattention") and not missing(page):
            labels.append(allocator_label(str(name), reserve, str(value), {"page_bytes": page}))
        else:
            labels.append(value)
    out["allocator_label"] = labels
    return out


def _known(df: pd.DataFrame, column: str, flag: str) -> None:
    if column not in df.columns:
        raise QueryError(f"{flag}: unknown column {column!r}")


def unit_of(column: str) -> str:
    """The unit of a summary column, from its name (``_ms``, ``_s``, ``_frac``, ``_bytes``)."""
    units = {"_ms": "ms", "_s": "s", "_frac": "a fraction", "_bytes": "bytes", "request_rate": "req/s"}
    return next((unit for suffix, unit in units.items() if column.endswith(suffix)), f"as {column} holds it")


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
        if _is_boolean(col):
            hit = _boolean_hit(col, column, op, raw)
            keep &= hit.fillna(False).astype(bool)
            continue
        numeric = pd.api.types.is_numeric_dtype(col)
        try:
            value = number(raw, unit_of(column), infinite=True) if numeric else raw
        except ValueError as exc:
            raise QueryError(f"--where: {column} {exc}") from None
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


_BOOLEANS = {"true": True, "false": False}


def _is_boolean(col: pd.Series) -> bool:
    """A column of true/false values (nulls allowed), whatever dtype pandas gave it."""
    if pd.api.types.is_bool_dtype(col):
        return True
    values = col.dropna()
    return col.dtype == object and len(values) > 0 and all(isinstance(v, bool) for v in values)


def _boolean_hit(col: pd.Series, column: str, op: str, raw: str) -> pd.Series:
    value = _BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise QueryError(f"--where: {column} is true/false; {raw!r} is neither")
    if op not in ("=", "==", "!="):
        raise QueryError(f"--where: {column} is true/false; use = or !=")
    hit = col.map(lambda v: None if v is None or v is pd.NA else bool(v) == value)
    return hit.map(lambda h: h is not None and (h if op != "!=" else not h))


def _order_key(col: pd.Series) -> pd.Series:
    """A sortable key for a column that mixes numbers and text: numbers first, then text."""
    if col.dtype != object:
        return col
    present = [v for v in dict.fromkeys(col.dropna().tolist())]
    ranked = sorted(present, key=lambda v: (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else (1, 0.0, str(v)))
    rank = {repr(v): i for i, v in enumerate(ranked)}
    return col.map(lambda v: rank.get(repr(v)) if not pd.isna(v) else None).astype("Float64")


def sort(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Sort by columns in order; ``-COL`` sorts that column descending. A column mixing numbers
    and text sorts numbers first (by value), then text (alphabetically)."""
    if not keys:
        return df
    columns = [k.lstrip("-") for k in keys]
    for column in columns:
        _known(df, column, "--sort")
    return df.sort_values(columns, ascending=[not k.startswith("-") for k in keys], kind="stable",
                          na_position="last", key=_order_key)


def in_sweep(df: pd.DataFrame, index_path: Path, sweep_dir: Path) -> pd.DataFrame:
    """Rows of runs stored under a sweep's directory (``results/runs/<experiment>/<sweep>``)."""
    base, sweep = index_path.parent.resolve(), sweep_dir.resolve()

    def inside(run_dir: object) -> bool:
        path = Path(str(run_dir))
        path = (path if path.is_absolute() else base / path).resolve()
        return path == sweep or sweep in path.parents

    return df[df["run_dir"].map(inside)]
