"""Where a run came from: the project's commit, whether the tree was clean, the command-line overrides.

Recorded in every summary (``commit``, ``tree_clean``, ``overrides``) so that a committed result
can be rerun from its own config and compared (``make verify-results``). ``overrides`` is the
Hydra job's override list as one JSON string (a summary holds flat values only); it is null for
a run started through ``run(cfg)`` outside the Hydra app. Without git (a bare copy of the tree)
``commit`` and ``tree_clean`` are null.
"""
from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROVENANCE_COLUMNS: tuple[str, ...] = ("commit", "tree_clean", "overrides")


@lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """The checked-out commit and whether tracked files are unmodified; (None, None) without git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, not status.strip()


def job_overrides() -> list[str] | None:
    """The running Hydra job's overrides (``experiment=...``, sweep values), or None outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig  # start-up time: Hydra, only inside a job

        return [str(o) for o in HydraConfig.get().overrides.task]
    except (ImportError, ValueError):
        return None


def provenance() -> dict[str, object]:
    """The summary's provenance columns for this process and job."""
    commit, clean = git_state()
    overrides = job_overrides()
    return {"commit": commit, "tree_clean": clean,
            "overrides": json.dumps(overrides) if overrides is not None else None}
