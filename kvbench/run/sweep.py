"""Hydra multirun helpers: one comparison table of the sweep's jobs at the end.

``ComparisonTable`` is registered in ``conf/config.yaml`` under ``hydra.callbacks``. Each job,
in whatever process or machine its launcher runs it, leaves a small record in
``<sweep dir>/.jobs/<job num>.json`` (its overrides, its run dir, whether it finished, its error).
When the multirun ends (any launcher, any sweeper: the basic one, Optuna) the driver prints one
table: a column per swept key with the value each job got, rows sorted by those values, then
the metrics people compare (throughput, TTFT, TPOT). A job that failed is a ``failed`` row.
Each job's own log stays in its ``app.log``.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from kvbench.results.naming import cell, granularity
from kvbench.results.query import in_sweep
from kvbench.run.progress import count_jobs, job_line, note_multirun_start, read_start, wanted
from kvbench.run.rundir import JOBS_DIR

log = logging.getLogger("kvbench")

METRIC_COLUMNS = ("granularity", "request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                  "p99_tpot_ms", "normalized_latency_s", "mean_batch_size", "num_preemptions")


def sweep_runs(index_path: Path, sweep_dir: Path):
    """The index rows (a DataFrame) of runs stored under sweep_dir, in index order."""
    from kvbench.results.store import load_index  # start-up time: pandas, at the sweep's end only

    return in_sweep(load_index(index_path), index_path, sweep_dir).reset_index(drop=True)


def _absolute(run_dir: object, index_path: Path) -> str:
    """An index row's run_dir (relative to the index's folder, or absolute), resolved."""
    path = Path(str(run_dir))
    return str((path if path.is_absolute() else index_path.parent / path).resolve())


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``["allocator=paged", "workload.request_rate=2"]`` -> {key: value text}; hydra.* left out."""
    pairs = (str(o).split("=", 1) for o in overrides if "=" in str(o))
    return {k.lstrip("+~"): v for k, v in pairs if not k.lstrip("+~").startswith("hydra")}


def swept_keys(config: DictConfig) -> list[str]:
    """The keys this multirun sweeps: sweep overrides on the command line, then the sweeper's params."""
    keys: list[str] = []
    task = list(config.hydra.overrides.get("task") or [])
    for override in OverridesParser.create().parse_overrides(task):
        if override.is_sweep_override():
            keys.append(override.key_or_group.lstrip("+~"))
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    keys += [str(k) for k in params]
    return list(dict.fromkeys(k for k in keys if not k.startswith("hydra")))


def job_failed(status: object, value: object) -> bool:
    """A job failed when Hydra says so, or when it returned nothing, a NaN, or a failure marker."""
    if str(getattr(status, "name", status)) == "FAILED" or value is None or isinstance(value, BaseException):
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, Mapping):
        return bool(value.get("failed") or value.get("error")) or str(value.get("status", "")).lower() == "failed"
    return str(getattr(value, "status", "")).lower() == "failed"  # kvbench.run.jobresult.JobFailed


def job_record(config: DictConfig, job_return: Any) -> dict:
    """What the driver needs about one job, from the job's own process."""
    value = getattr(job_return, "_return_value", None)  # .return_value raises for a failed job
    run_dir = Path(str(config.hydra.runtime.output_dir))
    finished = (run_dir / "summary.json").is_file()
    error = None
    if not finished or job_failed(getattr(job_return, "status", None), value):
        if isinstance(value, BaseException):
            error = str(value).strip().splitlines()[0] if str(value).strip() else type(value).__name__
        elif isinstance(value, Mapping) and value.get("error"):
            error = str(value["error"]).splitlines()[0]
        elif getattr(value, "error", None):  # kvbench.run.jobresult.JobFailed
            error = str(value.error).splitlines()[0]
        else:
            error = "failed (no finished run)" if not finished else "failed"
    started = _JOB_STARTS.pop(int(config.hydra.job.num), None)
    return {"num": int(config.hydra.job.num), "pid": os.getpid(), "overrides": list(job_return.overrides or []),
            "run_dir": str(run_dir.resolve()), "finished": finished and error is None, "error": error,
            "wall_s": time.time() - started if started is not None else None}


_JOB_STARTS: dict[int, float] = {}  # job num -> when it started, in the job's own process


def write_job_record(sweep_dir: Path, record: Mapping[str, object]) -> None:
    folder = sweep_dir / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{record['num']}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(folder / f"{record['num']}.json")


def read_job_records(sweep_dir: Path) -> list[dict]:
    records = []
    for path in sorted((sweep_dir / JOBS_DIR).glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except ValueError:
            continue
    return records


def _records_from_runs(runs, index_path: Path) -> list[dict]:
    """Records of runs whose jobs left none (a launcher on machines without the sweep dir shared):
    their overrides from the ``.hydra/overrides.yaml`` Hydra wrote next to the summary."""
    records = []
    for row in runs:
        run_dir = _absolute(row["run_dir"], index_path)
        saved = Path(run_dir) / ".hydra" / "overrides.yaml"
        overrides = list(OmegaConf.load(saved)) if saved.is_file() else []
        records.append({"num": None, "overrides": overrides, "run_dir": run_dir, "finished": True, "error": None})
    return records


def _sort_key(value: object) -> tuple:
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))


def sweep_rows(records: Sequence[Mapping], runs, index_path: Path, keys: Sequence[str]) -> list[dict]:
    """One row per job: its swept values, status and summary columns; sorted by the swept values."""
    by_dir = {_absolute(row["run_dir"], index_path): row for row in runs.to_dict("records")}
    seen = {str(r["run_dir"]) for r in records}
    leftover = [row for run_dir, row in by_dir.items() if run_dir not in seen]
    rows = []
    for record in [*records, *_records_from_runs(leftover, index_path)]:
        values = parse_overrides(record.get("overrides") or [])
        summary = by_dir.get(str(record["run_dir"])) if record.get("finished") else None
        row = {**summary, "granularity": granularity(summary)} if summary is not None else {}
        row.update({key: values.get(key) for key in keys}, status="ok" if summary is not None else "failed")
        if summary is None:
            row["error"] = record.get("error") or "failed"
        rows.append(row)
    return sorted(rows, key=lambda r: [_sort_key(r.get(k)) for k in keys])


def unswept_settings(rows: Sequence[Mapping], keys: Sequence[str]) -> list[str]:
    """Settings that differ between finished jobs with the same swept values (a job rerun with
    another knob into the same sweep dir): shown as columns so no two rows look alike while they
    are not (``kvbench.results.grouping``); nothing is averaged."""
    import pandas as pd  # start-up time: pandas, at the sweep's end only

    from kvbench.results.grouping import distinct_settings, settings_that_vary, split  # start-up time: as above

    done = pd.DataFrame([r for r in rows if r.get("status") == "ok"])
    if done.empty:
        return []
    present = [k for k in keys if k in done.columns]
    found: dict[str, None] = {}
    for part in split(done, present):
        found.update((c, None) for c in settings_that_vary(part, ignore=[*keys, "status", "error"]))
    return distinct_settings(done, [c for c in found if c not in keys], given=present)


def table_columns(rows: Sequence[Mapping], keys: Sequence[str]) -> list[str]:
    """The sweep table's columns: swept keys, any setting that tells alike-looking rows apart,
    the status and the compared metrics."""
    return [*keys, *unswept_settings(rows, keys), "status", *METRIC_COLUMNS]


def format_sweep_table(rows: Sequence[Mapping], keys: Sequence[str], metric: str | None = None) -> str:
    """The swept keys, status, the compared metrics (and the sweeper's metric); ``-`` where none."""
    import pandas as pd  # start-up time: pandas, at the sweep's end only

    columns = table_columns(rows, keys)
    if metric and metric not in columns:
        columns.append(metric)
    if any(r.get("status") == "failed" for r in rows):
        columns.append("error")
    frame = pd.DataFrame(list(rows)).reindex(columns=columns)
    return frame.astype(object).map(cell).to_string(index=False)


class ComparisonTable(Callback):
    """Records each job's outcome (and, at a terminal, prints its progress line), then prints
    the comparison table of a multirun's jobs."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        task = list(config.hydra.overrides.get("task") or [])
        parallel = OmegaConf.select(config, "hydra.launcher.n_jobs")
        try:
            note_multirun_start(Path(str(config.hydra.sweep.dir)) / JOBS_DIR,
                                count_jobs(task, OmegaConf.select(config, "hydra.sweeper")),
                                int(parallel) if isinstance(parallel, int) and parallel > 0 else 1)
        except OSError as exc:  # progress lines then go without a total; the sweep goes on
            log.warning("could not note the multirun's start: %s", exc)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:  # a single run has no job number
            return
        _JOB_STARTS[int(config.hydra.job.num)] = time.time()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        record = job_record(config, job_return)
        try:
            write_job_record(sweep_dir, record)
        except OSError as exc:  # the table then falls back on the index; the job's result stands
            log.warning("could not record job %s for the sweep table: %s", config.hydra.job.num, exc)
        _print_progress(config, sweep_dir, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        import pandas as pd  # start-up time: pandas, at the sweep's end only

        index = Path(str(config.results_dir)) / "index.jsonl"
        sweep_dir = Path(str(config.hydra.sweep.dir))
        runs = sweep_runs(index, sweep_dir) if index.is_file() else pd.DataFrame(columns=["run_dir"])
        records = read_job_records(sweep_dir)
        if runs.empty and not records:
            log.info("no runs finished in %s", sweep_dir)
            return
        keys = swept_keys(config)
        rows = sweep_rows(records, runs, index, keys)
        failed = sum(r["status"] == "failed" for r in rows)
        metric = str(config.get("optimized_metric") or "request_throughput")
        note = f", {failed} failed" if failed else ""
        log.info("%d run(s) of this sweep%s (%s):\n%s", len(rows), note, sweep_dir,
                 format_sweep_table(rows, keys, metric))
        _log_sweep_table(config, rows, keys)


def _print_progress(config: DictConfig, sweep_dir: Path, record: Mapping[str, object]) -> None:
    """``job 3 of 12 done ...`` on stderr, straight (never into a log), at a terminal only."""
    if not wanted(OmegaConf.select(config, "progress", default=True)):
        return
    print(job_line(read_job_records(sweep_dir), read_start(sweep_dir / JOBS_DIR), dict(record)),
          file=sys.stderr, flush=True)


def _log_sweep_table(config: DictConfig, rows: Sequence[Mapping], keys: Sequence[str]) -> None:
    """One W&B table of the whole sweep (logger=wandb only)."""
    if str(OmegaConf.select(config, "logger.name") or "none") != "wandb":
        return
    from kvbench.loggers.sweep_table import log_sweep_table  # optional dependency: wandb, for logger=wandb

    log_sweep_table(config, rows, table_columns(rows, keys))
