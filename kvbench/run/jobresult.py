"""What a multirun job returns when it fails: a marker that carries its one-line error.

A job of a sweep that fails after the pre-check (a model that cannot load, a full disk) must
not raise: Hydra's sweepers read every job's return value and re-raise a failed job's error,
which ends the whole multirun with a traceback. The job returns a ``JobFailed`` instead, and
appends its line to ``failed_jobs.jsonl`` in the sweep's directory (``read_failures``), which
the parent process reads at the end (``FailedJobs``: one line, exit status 1).

``JobFailed`` pickles (it crosses joblib's worker processes) and is deliberately not a number:
the Optuna sweeper tells a trial whose value ``float()`` refuses as FAILED and goes on with the
study, whereas a NaN makes optuna 2.x raise inside the sweeper. ``failure(ret)`` tells a table
which jobs failed and why::

    for job in job_returns:
        error = failure(job.return_value)   # None for a job that finished
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from kvbench.run.precheck import PLANNED

STATUS_FAILED = "failed"


class JobFailed:
    """A failed job: ``status == "failed"``, its ``error`` line and its ``overrides``."""

    status = STATUS_FAILED

    def __init__(self, error: str, overrides: str = "") -> None:
        self.error = error
        self.overrides = overrides

    def __float__(self) -> float:
        raise TypeError(f"job failed: {self.error}")

    def __repr__(self) -> str:
        return f"job failed: {self.error}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobFailed) and (self.error, self.overrides) == (other.error, other.overrides)


def failure(value: object) -> str | None:
    """The error line of a failed job's return value, None for any other value."""
    return value.error if isinstance(value, JobFailed) else None


FAILURES_FILE = "failed_jobs.jsonl"  # in the sweep's directory: one JSON object per failed job


def record_failure(sweep_dir: Path, job: int, overrides: str, error: str, kept: bool = False) -> None:
    """Append a failed job to its sweep's record (best effort: a job whose record a full disk
    lost is still counted, as one that left no finished run; ``kept``: its run dir stays)."""
    row = json.dumps({"job": job, "overrides": overrides, "error": error, "kept": kept}) + "\n"
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(sweep_dir / FAILURES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, row.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def read_failures(sweep_dir: Path) -> list[dict]:
    """The failed jobs of a sweep, in the order they failed (torn lines skipped)."""
    try:
        lines = (Path(sweep_dir) / FAILURES_FILE).read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


class FailedJobs(Callback):
    """At the end of a multirun: one line counting the failed jobs; the process then exits 1."""

    failed = 0  # read by kvbench.app.main once Hydra returns

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        rows = read_failures(sweep_dir)
        basic = "BasicSweeper" in str(config.hydra.sweeper.get("_target_", ""))  # it runs exactly the planned jobs
        unrecorded = _unrecorded_failures(sweep_dir, rows) if basic else 0
        FailedJobs.failed = len(rows) + unrecorded
        if FailedJobs.failed:
            named = [f"job {r['job']} ({r['overrides'] or 'no overrides'})" for r in rows]
            named += [f"{unrecorded} more that left no finished run"] if unrecorded else []
            print(f"kvbench: {FailedJobs.failed} job(s) of this sweep failed: " + "; ".join(named), file=sys.stderr)


def _unrecorded_failures(sweep_dir: Path, rows: list[dict]) -> int:
    """Jobs the pre-check planned that neither finished a run nor recorded their failure (a
    worker killed, a record a full disk lost); 0 where the sweeper picks the jobs itself."""
    planned = PLANNED.get("jobs")
    if not planned or len(PLANNED.get("dirs", [])) != 1:
        return 0
    finished = sum(1 for _ in sweep_dir.rglob("summary.json"))
    failed_without_run = sum(1 for r in rows if not r.get("kept"))
    return max(0, planned - finished - failed_without_run)
