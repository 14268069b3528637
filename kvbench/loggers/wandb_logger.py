"""Weights & Biases logger. Offline unless the config says ``mode: online``; never needs an
account offline. The only module of the project that imports wandb at import time.

What one run holds:

- name: ``<allocator label>-bs<block size>-<workload>-r<rate>`` (``kvbench.results.naming``), unless
  the caller passes one; the label is the allocator's config name (``orca-max``);
- config: the resolved config flattened to ``a.b.c`` keys, ``allocator_label`` from the start,
  and the run's identity columns (``allocator``, ``block_size``, ``workload``,
  ``request_rate``, ...) as top-level keys once the summary is known, so workspaces group runs
  by ``Config("allocator_label")``: Orca Max, Pow2 and Oracle stay apart; with them every
  setting as the summary records it (``cfg.<key>`` and ``cfg_keys``, ``kvbench.results.settings``);
- tags ``allocator=<label>``, ``reserve``, ``block_size``, ``workload``, ``request_rate``,
  ``experiment`` plus ``logger.tags``; the group is the sweep's (``logger.group``, else the one
  the app passes);
- artifact ``run-<run_id>`` (type ``kvbench-run``): the run directory's ``summary.json`` and
  parquet files, logged at finish;
- history: ``steps/<metric>`` against the engine step ``step`` (``define_metric``); see
  ``StepSampler`` for which steps; plus one ``by_rate/*`` point per run keyed by
  ``by_rate/request_rate`` (line plots of latency against request rate across runs);
- summary: only the metrics people compare (``base.compared_metrics``: throughput, goodput,
  peaks, latencies in ms, batching, memory, pressure, outcome), each once; no last-step
  ``steps/*`` or ``by_rate/*`` values; ``requests`` (a Table) and ``figures/<stem>`` (Images)
  are logged as media;
- a run that fails (``finish(exit_code != 0)``) keeps no W&B directory: the local run folder
  and the folders ``start`` made for it are removed, wherever ``logger.dir`` put them;
- console: W&B's banner and its per-run lines are silenced unless ``logger.verbose=true``.
"""
from __future__ import annotations

import math
import numbers
import os
import secrets
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import wandb

from kvbench.results.store import SUMMARY_COLUMNS

from kvbench.results.naming import fields_from_config, run_name, run_tags
from kvbench.results.settings import KEYS_COLUMN, is_recorded

from .base import RATE_PREFIX, STEP_METRIC, STEP_PREFIX, Logger, compared_metrics, flatten_config

IDENTITY_COLUMNS = (*SUMMARY_COLUMNS[: SUMMARY_COLUMNS.index("seed") + 1], "allocator_label")
ARTIFACT_FILES = ("summary.json", "*.parquet")
RATE_METRICS = (
    "normalized_latency_s", "mean_ttft_s", "mean_tpot_s", "request_throughput",
    "output_token_throughput", "mean_batch_size", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "request_goodput", "goodput",
    "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac",
)  # fmt: skip
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp"}
MAX_TAG_LEN = 64  # W&B's limit on one tag
ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"  # W&B's own run ids: 8 of these


def _scalar(value: Any) -> float | int | bool | None:
    """value as a loggable number, or None if it is not a finite-or-nan real number."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


class StepSampler:
    """Keeps at most ``limit`` evenly spaced steps out of a stream of unknown length.

    It keeps every ``stride``-th call (stride starts at 1). When more than ``limit`` rows are
    held it drops every other one and doubles the stride, so memory stays O(limit) and the
    kept steps are always evenly spaced: after n calls it holds between limit/2 and limit
    rows (all of them while n <= limit). ``limit <= 0`` disables the cap.
    """

    __slots__ = ("limit", "stride", "calls", "rows")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stride = 1
        self.calls = 0
        self.rows: list[dict[str, Any]] = []

    def offer(self, step: int, metrics: Mapping[str, Any]) -> None:
        keep = self.calls % self.stride == 0
        self.calls += 1
        if not keep:
            return
        row = {STEP_METRIC: int(step)}
        for key, value in metrics.items():
            number = _scalar(value)
            if number is not None and key != STEP_METRIC:
                row[STEP_PREFIX + key] = number
        self.rows.append(row)
        if 0 < self.limit < len(self.rows):
            self.rows = self.rows[::2]
            self.stride *= 2

    def drain(self) -> list[dict[str, Any]]:
        rows, self.rows = self.rows, []
        return rows


class WandbLogger(Logger):
    """Logs a run to W&B. Per-step metrics are buffered (see StepSampler) and written when the
    summary is logged or the run finishes, each kept step as one committed history row; the
    complete per-step record is the run's steps.parquet."""

    def __init__(
        self,
        project: str = "kvbench",
        entity: str | None = None,
        mode: str = "offline",
        group: str | None = None,
        tags: Sequence[str] = (),
        dir: str | Path | None = None,
        max_step_logs: int | None = 2000,
        verbose: bool = False,
    ) -> None:
        if mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.mode={mode!r} is not allowed; use offline, online or disabled")
        self.project = project
        self.entity = entity
        self.mode = mode
        self.group = group
        self.tags = list(tags)
        self.dir = Path(dir) if dir is not None else None
        self.max_step_logs = int(max_step_logs or 0)
        self.verbose = bool(verbose)
        self.run: wandb.Run | None = None
        self._steps = StepSampler(self.max_step_logs)
        self._run_id = ""
        self._run_dir: Path | None = None
        self._made: list[Path] = []
        self._wandb_id = ""
        self._wandb_dir = Path("wandb")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> WandbLogger:
        """Build from the ``logger`` config group (conf/logger/wandb.yaml)."""
        known = {"name", "project", "entity", "mode", "group", "tags", "dir", "max_step_logs", "verbose"}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(
                f"logger.{unknown[0]} is not a wandb logger key; allowed: {', '.join(sorted(known))}"
            )
        kwargs = {k: cfg[k] for k in known - {"name"} if k in cfg}
        if kwargs.get("tags") is None:
            kwargs["tags"] = ()
        return cls(**kwargs)

    # -- Logger interface ------------------------------------------------------------------

    def start(
        self,
        config: Mapping[str, Any],
        run_id: str,
        name: str,
        group: str | None = None,
        tags: Sequence[str] = (),
        *,
        run_dir: str | Path | None = None,
    ) -> None:
        if self.run is not None:
            raise RuntimeError("WandbLogger.start called twice; call finish first")
        flat = flatten_config(config)
        flat.setdefault("run_id", run_id)
        fields = fields_from_config(flat)
        if fields["allocator_label"] is not None:
            flat.setdefault("allocator_label", fields["allocator_label"])
        all_tags = [str(t)[:MAX_TAG_LEN] for t in [*run_tags(fields), *tags, *self.tags]]
        self._run_id, self._run_dir = run_id, Path(run_dir) if run_dir else None
        directory = self.dir if self.dir is not None else (Path(run_dir) if run_dir else None)
        self._made = []  # the folders this start made, outermost first: removed if a failed run leaves them empty
        if directory is not None:
            self._made = [d for d in (*reversed(directory.parents), directory, directory / "wandb") if not d.exists()]
            directory.mkdir(parents=True, exist_ok=True)
        self._steps = StepSampler(self.max_step_logs)
        self._wandb_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(8))  # W&B's kind of id, known before init ends
        self._wandb_dir = (directory if directory is not None else Path.cwd()) / "wandb"
        self.run = wandb.init(
            id=self._wandb_id,
            project=self.project,
            entity=self.entity,
            mode=self.mode,
            group=self.group if self.group is not None else group,
            tags=list(dict.fromkeys(all_tags)),
            name=name or run_name(fields),
            config=flat,
            dir=str(directory) if directory is not None else None,
            reinit="finish_previous",
            settings=wandb.Settings(silent=not self.verbose, quiet=not self.verbose),
        )
        self.run.define_metric(STEP_METRIC, summary="none")
        self.run.define_metric(RATE_PREFIX + "*", step_metric=RATE_PREFIX + "request_rate", summary="none")
        self.run.define_metric(STEP_PREFIX + "*", step_metric=STEP_METRIC, summary="none")
        self.run.define_metric("*", step_metric=STEP_METRIC, summary="none")  # globs race: every one says none

    def log_step(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self.run is None:
            return
        if self.max_step_logs <= 0:  # no cap: log every step as it comes
            self._steps.offer(step, metrics)
            self._flush_steps()
        else:
            self._steps.offer(step, metrics)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        if self.run is None:
            return
        self._flush_steps()
        values = {k: v for k, v in summary.items() if v is not None}
        values = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in values.items()}
        self.run.summary.update(compared_metrics(values))
        identity = {k: values[k] for k in (*IDENTITY_COLUMNS, "granularity", "max_concurrency") if k in values}
        # every setting as the summary records it (cfg.<key>, nulls too), so workspaces group as compare does
        record = {k: v for k, v in summary.items() if is_recorded(k) or k == KEYS_COLUMN}
        self.run.config.update(identity | record, allow_val_change=True)
        rate = _scalar(values.get("request_rate"))
        if rate is not None and math.isfinite(rate):  # a burst (rate inf) has no point
            point = {RATE_PREFIX + "request_rate": rate}
            for key in RATE_METRICS:
                number = _scalar(values.get(key))
                if number is not None:
                    point[RATE_PREFIX + key] = number
            self.run.log(point)

    def log_requests(self, requests) -> None:
        if self.run is None or requests is None:
            return
        nested = [c for c in requests.columns if len(requests) and isinstance(requests[c].iloc[0], (list, np.ndarray))]
        requests = requests.drop(columns=nested)  # per-token times stay in requests.parquet
        limit = wandb.Table.MAX_ROWS
        if len(requests) > limit:  # W&B would silently keep only the first MAX_ROWS
            warnings.warn(
                f"requests table has {len(requests)} rows; logging {limit} evenly spaced ones"
                " (requests.parquet has them all)"
            )
            requests = requests.iloc[np.linspace(0, len(requests) - 1, limit).astype(int)]
        self.run.log({"requests": wandb.Table(dataframe=requests.reset_index(drop=True))})

    def log_figures(self, paths: Sequence[str | Path]) -> None:
        if self.run is None:
            return
        images = {
            f"figures/{Path(p).stem}": wandb.Image(str(p))
            for p in paths
            if Path(p).suffix.lower() in IMAGE_SUFFIXES
        }
        if images:
            self.run.log(images)

    def finish(self, exit_code: int = 0) -> None:
        run, self.run = self.run, None
        if run is None:
            if exit_code != 0:  # wandb.init failed or was interrupted: what it made so far
                try:
                    wandb.teardown()  # its service would go on writing into the run folder
                except Exception:  # noqa: BLE001 - nothing to stop
                    pass
                self._remove_local(None)
            return
        local = Path(run.dir).parent
        try:
            self._flush_steps(run)
            if exit_code == 0:
                self._log_run_files(run)
        finally:
            try:
                run.finish(exit_code=exit_code)
            finally:  # even when finishing failed (W&B's service gone on a signal)
                if exit_code != 0:
                    self._remove_local(local)

    def _remove_local(self, local: Path | None) -> None:
        """A failed run keeps nothing: remove the W&B run directory this run's ``wandb.init`` made,
        the links W&B pointed at it (``latest-run``, ``debug*.log``), and the folders ``start``
        made that are left empty; nothing else."""
        if local is None and self._wandb_id and self._wandb_dir.is_dir():  # init did not return
            local = next(self._wandb_dir.glob(f"*run-*-{self._wandb_id}"), None)
        if local is not None:
            self._remove_run_folder(local)
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

    @staticmethod
    def _remove_run_folder(local: Path) -> None:
        shutil.rmtree(local, ignore_errors=True)
        for link in local.parent.iterdir() if local.parent.is_dir() else ():
            if link.is_symlink() and Path(os.readlink(link)).parts[:1] == (local.name,):
                link.unlink(missing_ok=True)

    # -- helpers ---------------------------------------------------------------------------

    @property
    def run_path(self) -> Path | None:
        """The local W&B run directory (``.../wandb/offline-run-<date>-<id>``), while started."""
        return Path(self.run.dir).parent if self.run is not None else None

    def _log_run_files(self, run: wandb.Run) -> None:
        """The run directory's summary and tables as one artifact (kept for ``wandb sync``)."""
        if self._run_dir is None:
            return
        files = sorted({p for pattern in ARTIFACT_FILES for p in self._run_dir.glob(pattern)})
        if not files:
            return
        artifact = wandb.Artifact(f"run-{self._run_id}", type="kvbench-run")
        for path in files:
            artifact.add_file(str(path), name=path.name)
        run.log_artifact(artifact)

    def _flush_steps(self, run: wandb.Run | None = None) -> None:
        run = run if run is not None else self.run
        for row in self._steps.drain():
            run.log(row)
