"""Can the results dir take a run? Checked in the pre-check, before anything is written."""
from __future__ import annotations

import os
from pathlib import Path

from kvbench.config.errors import ConfigError
from kvbench.results.outputs import inside_run_folder

MIN_FREE_BYTES = 16 << 20  # a run's parquet files and summary; far more with memmap snapshots


def _min_free() -> int:
    """MIN_FREE_BYTES, or KVBENCH_MIN_FREE_BYTES (tests lower it to fill a disk mid-run)."""
    return int(os.environ.get("KVBENCH_MIN_FREE_BYTES", MIN_FREE_BYTES))


def check_results_dir(results: Path) -> None:
    """Raise ConfigError unless runs and the index can be written under ``results``."""
    folder = results.expanduser().absolute()
    existing = folder
    while not existing.exists():
        if existing == existing.parent:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"results_dir: {existing} is not a directory")
    if inside_run_folder(folder / "index.jsonl"):
        raise ConfigError(f"results_dir: {folder} is inside a run folder (a run's folder is not a results folder); "
                          "give a folder of its own")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"results_dir: cannot write in {existing} (read-only or no permission)")
    try:
        stats = os.statvfs(existing)
    except OSError:
        stats = None
    if stats is not None and stats.f_bavail * stats.f_frsize < _min_free():
        free = stats.f_bavail * stats.f_frsize
        raise ConfigError(f"results_dir: only {free / 2**20:.1f} MiB free on {existing}; a run needs at least "
                          f"{_min_free() / 2**20:.0f} MiB")
    index = folder / "index.jsonl"
    if index.exists():
        try:
            with open(index, "ab"):
                pass  # opening for append writes nothing
        except OSError as exc:
            raise ConfigError(f"results_dir: the index {index} cannot be written ({exc.strerror})") from None
