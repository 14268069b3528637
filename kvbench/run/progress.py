"""Progress on long work, for a person at a terminal only.

``progress=true`` (the default) shows it when stderr is a terminal and ``CI`` is not set; never
in a log file (it goes to stderr directly, not through logging) nor in CI output.

- One run: a bar of requests done, the simulated seconds reached and the wall time left.
- A multirun: a line per finished job, ``job 3 of 12 done``, the time since the multirun began
  and the time left, estimated from the finished jobs' durations (their mean, times the jobs
  left, over the jobs the launcher runs at once).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kvbench.run.rundir import START_FILE


def wanted(flag: object, stream: TextIO | None = None) -> bool:
    """Show progress: the config says so, the stream is a terminal, and this is not CI."""
    stream = stream if stream is not None else sys.stderr
    if not flag or os.environ.get("CI"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def clock(seconds: float) -> str:
    """``75`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class RunProgress:
    """A run's bar: requests done of the total, simulated seconds, wall time left (tqdm's ETA
    from the requests' pace). The engine calls ``update_to`` after every step."""

    def __init__(self, total: int, desc: str, stream: TextIO | None = None, delay: float = 2.0) -> None:
        from tqdm.auto import tqdm  # start-up time: only when a bar is shown

        self.bar = tqdm(total=total, desc=desc, unit="req", delay=delay, leave=False,
                        file=stream if stream is not None else sys.stderr,
                        postfix=["0.0"],
                        bar_format="{desc}: {n_fmt}/{total_fmt} req |{bar:20}| sim {postfix[0]} s "
                                   "[{elapsed} elapsed, {remaining} left]")
        self._shown = 0.0

    def update_to(self, finished: int, sim_s: float = 0.0) -> None:
        now = time.monotonic()
        if now - self._shown >= 0.25 or finished == self.bar.total:  # the postfix at most 4 times a second
            self._shown = now
            self.bar.postfix[0] = f"{sim_s:.1f}"
        if finished != self.bar.n:
            self.bar.update(finished - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def note_multirun_start(jobs_dir: Path, num_jobs: int | None, parallel: int) -> None:
    """The multirun's start time, job count and parallelism, for every job's progress line."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    tmp = jobs_dir / f".{START_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"start": time.time(), "num_jobs": num_jobs, "parallel": parallel}))
    tmp.replace(jobs_dir / START_FILE)


def read_start(jobs_dir: Path) -> dict:
    try:
        return json.loads((jobs_dir / START_FILE).read_text())
    except (OSError, ValueError):
        return {}


def job_line(records: Sequence[dict], start: dict, last: dict, now: float | None = None) -> str:
    """``job 3 of 12 done (ok, 4.1 s); 0:12 elapsed, about 0:31 left`` from the finished jobs'
    records (each with ``wall_s`` and ``finished``; ``last`` the job that just ended) and the
    multirun's start record."""
    now = time.time() if now is None else now
    done = max(len(records), 1)
    total = start.get("num_jobs")
    status = "ok" if last.get("finished") else "failed"
    durations = [float(r["wall_s"]) for r in records if isinstance(r.get("wall_s"), (int, float))]
    head = f"job {done} of {total}" if total else f"job {done}"
    line = f"kvbench: {head} done ({status}, {float(last.get('wall_s') or 0.0):.1f} s)"
    if "start" in start:
        line += f"; {clock(now - float(start['start']))} elapsed"
    if total and durations and done < total:
        left = total - done
        parallel = max(1, min(int(start.get("parallel") or 1), left))
        line += f", about {clock(sum(durations) / len(durations) * left / parallel)} left"
    return line


def count_jobs(task_overrides: Sequence[str], sweeper_cfg) -> int | None:
    """How many jobs a multirun has: the basic sweeper's expansion of the command line and its
    ``params``; Optuna's ``n_trials``; None where it cannot be known beforehand."""
    target = str(sweeper_cfg.get("_target_", "")) if sweeper_cfg is not None else ""
    if "BasicSweeper" not in target:
        trials = sweeper_cfg.get("n_trials") if sweeper_cfg is not None else None
        return int(trials) if isinstance(trials, int) else None
    from kvbench.run.precheck import _job_overrides  # start-up time: the pre-check's modules, only to count a sweep's jobs

    try:
        params = [f"{k}={v}" for k, v in (sweeper_cfg.get("params") or {}).items()]  # as the sweeper reads them
        return len(_job_overrides(list(task_overrides), True, params))
    except Exception:  # an override the basic sweeper would refuse: Hydra reports it itself
        return None
