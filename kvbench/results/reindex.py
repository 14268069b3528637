"""Finished and unfinished run dirs: the rows the index lacks, ``--reindex`` and ``--clean``.

A run dir is finished when it holds ``summary.json``. Readers add the finished runs under
``<index folder>/runs`` that have no index row (a run killed between its summary and its row),
so no finished run is ever invisible. ``reindex`` rebuilds the index from those run dirs and keeps
every old row: one whose run dir still holds a finished run (stored outside ``runs/``) is re-read
from it; one whose run dir is gone is kept as it was and counted (never lost: remove such lines by
hand once the runs are known to be gone). Without a ``runs/`` folder next to the index there is
nothing to rebuild from: ``reindex`` refuses and leaves the index as it is. ``clean`` removes only the dirs
that kvbench made for a run whose process is dead (``kvbench.run.rundir.is_dead_run``), and in them
only the files kvbench writes.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import NamedTuple

from kvbench.results.store import ResultsError, atomic_write, run_dirs, summary_row
from kvbench.run.rundir import SUMMARY_FILE, is_dead_run, remove_outputs


class Reindexed(NamedTuple):
    rows: int  # rows in the new index
    unfinished: int  # unfinished run dirs under runs/ (not indexed)
    kept: int  # old rows of finished runs stored outside runs/
    missing: int  # old rows whose run dir no longer holds a finished run (kept as they were)
    unreadable: list[str]  # summary.json files that are not a summary (skipped, or their old row kept)


def _old_rows(index_path: Path) -> list[dict]:
    if not index_path.is_file():
        return []
    rows = []
    for line in index_path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("run_id"), str):
            rows.append(obj)
    return rows


def _resolve(index_path: Path, run_dir: object) -> Path | None:
    if not isinstance(run_dir, str) or not run_dir:
        return None
    path = Path(run_dir)
    return path if path.is_absolute() else index_path.parent / path


def check_index_path(index_path: Path, must_exist: bool) -> None:
    """ResultsError unless ``index_path`` names an index file in an existing folder."""
    if index_path.is_dir():
        raise ResultsError(f"--index: {index_path} is a folder; give the index file "
                           f"(e.g. {index_path / 'index.jsonl'})")
    if not index_path.parent.is_dir():
        raise ResultsError(f"--index: no results folder {index_path.parent} (nothing was created)")
    if must_exist and not index_path.is_file():
        raise ResultsError(f"no index at {index_path}")


def reindex(index_path: str | os.PathLike) -> Reindexed:
    """Rebuild the index from the finished runs under ``<index folder>/runs`` and the old rows whose
    run dir still holds a finished run; replace it atomically under the index lock.

    Rows are ordered by the time each summary.json was written.
    """
    index_path = Path(index_path)
    check_index_path(index_path, must_exist=False)
    runs = index_path.parent / "runs"
    if not runs.is_dir():
        rows = len(_old_rows(index_path))
        raise ResultsError(f"--reindex: no runs/ folder next to {index_path} (nothing to rebuild from); "
                           f"the index is left as it is ({rows} rows)")
    finished, unfinished = run_dirs(runs)
    entries: dict[str, tuple[float, dict]] = {}
    unreadable: list[str] = []
    for folder in finished:
        try:
            row = summary_row(folder, index_path)
        except ResultsError as exc:
            unreadable.append(str(exc))
            continue
        entries[row["run_id"]] = ((folder / SUMMARY_FILE).stat().st_mtime, row)
    kept = missing = 0
    for order, old in enumerate(_old_rows(index_path)):
        if old["run_id"] in entries:
            continue
        folder = _resolve(index_path, old.get("run_dir"))
        if folder is None or not (folder / SUMMARY_FILE).is_file():
            missing += 1
            entries[old["run_id"]] = (order - 1e9, old)  # before every summary's mtime, in their old order
            continue
        try:
            row = summary_row(folder, index_path)
        except ResultsError as exc:
            unreadable.append(str(exc))
            row = old  # a finished run whose summary cannot be read: its row stays as it was
        if row["run_id"] != old["run_id"]:
            row = old
        entries[old["run_id"]] = ((folder / SUMMARY_FILE).stat().st_mtime, row)
        kept += 1
    rows = [row for _, row in sorted(entries.values(), key=lambda item: item[0])]
    text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows).encode()
    lock_path = index_path.with_name(index_path.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            atomic_write(index_path, lambda f: f.write(text))
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return Reindexed(len(rows), len(unfinished), kept, missing, unreadable)


def clean(index_path: str | os.PathLike) -> list[Path]:
    """Remove the dirs under ``<index folder>/runs`` that kvbench made for runs whose process is
    dead, and in them only the files kvbench writes; the dirs removed whole."""
    index_path = Path(index_path)
    check_index_path(index_path, must_exist=False)
    removed = []
    for folder in run_dirs(index_path.parent / "runs")[1]:
        if not is_dead_run(folder):
            continue
        if not remove_outputs(folder):
            try:
                folder.rmdir()
                removed.append(folder)
            except OSError:
                pass
    return removed
