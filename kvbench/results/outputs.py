"""The one writer of every file a tool writes on a user's request (``--out``, ``--output``).

A tool's output may go anywhere the user names except onto what the tool does not own:

- the results index (``index.jsonl``, its lock, or any file holding index rows) or anything inside a
  run folder (a folder holding a run's ``summary.json``, ``steps.parquet``, ``requests.parquet``,
  ``.running`` or ``.hydra``, or anything under a results folder's ``runs/``);
- a symbolic link (the link would be replaced by a file), a directory, or anything else that is not
  a regular file;
- an existing regular file, unless the user passed ``--force``.

A file a tool writes into a folder it created itself (``kvbench-capacity``'s ``capacity.json`` in
its search's folder under ``runs/``) passes that folder as ``owned``: the run-folder rule does not
apply there, every other rule does.

Every refusal is an :class:`OutputError` with a one-line message, raised before the tool does any
work where the tool checks first (``check_target``), and again at the moment of writing. Files are
written to a temporary name in the same folder, flushed, then renamed onto the target, so a reader
never sees half a file and an interrupted write leaves nothing behind.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

INDEX_NAMES = ("index.jsonl", "index.jsonl.lock")
RUN_MARKERS = ("summary.json", "steps.parquet", "requests.parquet", ".running", ".hydra")


class OutputError(ValueError):
    """A target the tool may not write; the message is one line."""


def check_target(path: str | Path, *, force: bool = False, flag: str = "--out", owned: Path | None = None) -> Path:
    """``path`` as a Path when a tool may write it; else OutputError naming ``flag``. ``owned``: a
    folder the tool created itself, where the run-folder rule does not apply."""
    target = Path(path)
    if str(path) == "" or target.name in ("", ".", ".."):
        raise OutputError(f"{flag}: {str(path)!r} names no file; give a file name")
    if target.is_symlink():
        raise OutputError(f"{flag}: {target} is a symbolic link (refused: the link would be replaced); "
                          "give a plain path")
    if target.is_dir():
        raise OutputError(f"{flag}: {target} is a directory; give a file name inside it")
    if target.exists() and not target.is_file():
        raise OutputError(f"{flag}: {target} exists and is not a regular file (refused)")
    if not target.parent.is_dir():
        raise OutputError(f"{flag}: folder {target.parent} does not exist (nothing was written)")
    if not _in_owned(target, owned) and inside_run_folder(target):
        raise OutputError(f"{flag}: {target} is inside a run folder (refused: a run's files are not outputs)")
    if _is_results_index(target):
        raise OutputError(f"{flag}: {target} is a results index (refused: it would be overwritten)")
    if target.exists() and not force:
        raise OutputError(f"{flag}: {target} exists; give another path or --force to replace it")
    return target


def _in_owned(target: Path, owned: Path | None) -> bool:
    return owned is not None and target.parent.resolve() == owned.resolve()


def _is_results_index(target: Path) -> bool:
    if target.name in INDEX_NAMES:
        return True
    if not target.is_file():
        return False
    try:
        with open(target, "rb") as f:
            first = f.readline(1 << 16)
        row = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and "run_id" in row


def inside_run_folder(target: Path) -> bool:
    """Whether ``target``'s folder is a run folder, lies inside one, or lies under a results folder's ``runs/``."""
    folder = target.parent.resolve()
    for ancestor in (folder, *folder.parents):
        if any((ancestor / marker).exists() for marker in RUN_MARKERS):
            return True
        if ancestor.name == "runs" and any((ancestor.parent / name).exists() for name in INDEX_NAMES):
            return True
    return False


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None], *, force: bool = False,
                 flag: str = "--out", owned: Path | None = None) -> Path:
    """Check ``path``, then call ``write(binary file)`` on a temporary file beside it and rename."""
    return write_many([path], [write], force=force, flag=flag, owned=owned)[0]


def write_text(path: str | Path, text: str, *, force: bool = False, flag: str = "--out",
               owned: Path | None = None) -> Path:
    """``text`` (UTF-8) to ``path`` through the one writer."""
    return write_atomic(path, lambda f: f.write(text.encode("utf-8")), force=force, flag=flag, owned=owned)


def write_many(paths: Sequence[str | Path], writers: Sequence[Callable[[BinaryIO], None]], *,
               force: bool = False, flag: str = "--out", owned: Path | None = None) -> list[Path]:
    """Several files as one output (a figure's PNG and SVG): all are checked before any is written,
    all are written to temporary names, then renamed; on any failure none is left behind."""
    targets = [check_target(p, force=force, flag=flag, owned=owned) for p in paths]
    temps: list[Path] = []
    try:
        for target, write in zip(targets, writers):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            temps.append(tmp)
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        for target in targets:  # checked again at the moment of writing: a link may have appeared
            check_target(target, force=True, flag=flag, owned=owned)
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    return targets
