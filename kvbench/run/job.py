"""The kvbench process: ``main`` runs the pre-check, then Hydra, whose ``@hydra.main`` function
makes one call per job (``kvbench.app.hydra_task`` -> ``hydra_job`` -> ``_job``); a job's errors and signals end in one line.

Every run gets its own directory named by its run_id (``<results_dir>/runs/<experiment>/<run_id>``;
a sweep's jobs under ``<experiment>/<sweep id>/<run_id>``), ids being ``YYYYmmdd-HHMMSS-<8 hex>``.
A single run claims its directory (``.running`` created exclusively) before Hydra writes into
it, so two runs given one ``hydra.run.dir`` cannot share it: the second exits 2 in one line.
A run is finished when its ``summary.json`` exists: it is written last, after the data files, and
the index row right after it, with SIGINT/SIGTERM held back for that step. A run that fails or is
interrupted before that removes what it wrote (exit 2 for bad input, 130 for SIGINT, 143 for
SIGTERM; ``kvbench/run/rundir.py`` says what it may remove, ``kvbench/run/signals.py`` where
signals land); one killed outright leaves a directory without ``summary.json``, which readers
ignore and ``kvbench-results --clean`` removes.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from kvbench.cli import quiet_libraries
from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.sweeper_checks import ADDED_OVERRIDES
from kvbench.metrics import format_report, parse_percentiles
from kvbench.run import signals
from kvbench.run.console import format_table
from kvbench.run.ids import PINNED_IDS, _looks_like_run_id, new_run_id
from kvbench.run.jobresult import FailedJobs, JobFailed, record_failure
from kvbench.run.lifecycle import run
from kvbench.run.precheck import NOTES, PLANNED, check_job, precheck
from kvbench.run.prepare import _errors
from kvbench.run.rundir import claim_run_dir, discard, discard_sweep, hold_run_lock
from kvbench.run.signals import Terminated


def _run_dir_and_id(hc) -> tuple[Path, str]:
    """The job's directory (Hydra made it) and its run_id, the directory's name when it is one."""
    run_dir = Path(hc.runtime.output_dir)
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"hydra.run.dir: {run_dir} already holds a finished run; give a new directory")
    return run_dir, run_dir.name if _looks_like_run_id(run_dir.name) else new_run_id()


def hydra_job(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    worker = signals.is_launcher_worker()
    run_dir = Path(hc.runtime.output_dir)
    try:
        with signals.job_running():
            if worker:  # a joblib process: clean up on SIGTERM, and stop once the kvbench process is gone
                signals.install_run_handlers()
                signals.watch_parent()
                if signals.orphaned():
                    raise Terminated()
            return _job(cfg, hc, run_dir, worker)
    finally:
        if worker and signals.orphaned():  # nobody waits for this worker any more
            discard(run_dir)
            os._exit(signals.EXIT_CODES[signal.SIGTERM])


def _job(cfg: DictConfig, hc, run_dir: Path, worker: bool) -> float | None:
    """One job of ``hydra_job``, from the run lock to its table."""
    multirun = hc.mode == RunMode.MULTIRUN
    logger = None
    lock = None
    since = signals.mark()
    try:
        run_dir, run_id = _run_dir_and_id(hc)
        lock = hold_run_lock(run_dir, run_id)
        spec = None  # the job's run spec, built once: here (a logger), or else by run's prepare
        if cfg.logger.name != "none":
            spec = check_job(cfg)  # the workload and pool before the logger makes anything
            from kvbench.loggers import build_logger  # optional dependency: wandb, only for logger=wandb

            logger = build_logger(cfg.logger)
            group = cfg.logger.get("group") or (f"{cfg.experiment_name}-{Path(hc.sweep.dir).name}" if multirun else str(cfg.experiment_name))
            tags = [f"experiment={cfg.experiment_name}"]
            logger.start(OmegaConf.to_container(cfg, resolve=True), run_id=run_id,
                         name=None, group=group, tags=tags, run_dir=run_dir)
        summary = run(cfg, run_dir=run_dir, logger=logger, run_id=run_id, spec=spec)
    except (KeyboardInterrupt, Terminated) as exc:
        _finish_logger(logger, 1)
        logger = None
        _interrupted(exc, run_dir, multirun, worker)
    except Exception as exc:  # one line, never a traceback (KVBENCH_TRACEBACK=1 shows it)
        _finish_logger(logger, 1)
        logger = None
        if signals.received(since) is not None:  # the error is what a signal left behind as it unwound
            _interrupted(signals.as_exception(signals.received(since)), run_dir, multirun, worker)
        kept = discard(run_dir)
        if os.environ.get("KVBENCH_TRACEBACK") == "1":
            raise
        line = error_line(exc)
        if multirun:  # this job fails; the sweeper goes on with the others (kvbench.run.jobresult)
            return job_failed(hc, line)
        code = 2 if isinstance(exc, _errors() + (OSError, ImportError)) else 1
        print(f"kvbench: error: {line}; {kept}", file=sys.stderr)
        sys.exit(code)
    except BaseException:
        _finish_logger(logger, 1)
        logger = None
        discard(run_dir)
        raise
    finally:
        _finish_logger(logger, 0)
        if lock is not None:
            lock.close()
            if (run_dir / "summary.json").exists():
                (run_dir / ".running").unlink(missing_ok=True)
    log = logging.getLogger("kvbench")  # Hydra sends it to the console and the run's app.log
    log.info("\n%s", format_table([summary]))
    nothing_served = _nothing_served(summary, run_dir)
    if nothing_served:
        print(f"kvbench: error: {nothing_served}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        record_failure(Path(hc.sweep.dir), int(hc.job.num), str(hc.job.override_dirname), nothing_served,
                       kept=True)
        return JobFailed(nothing_served, str(hc.job.override_dirname))  # the sweep exits 1
    metrics = cfg.get("metrics") or {}
    if metrics.get("report"):
        log.info("\n%s", format_report(summary, parse_percentiles(metrics.get("percentiles"))))
    log.info("results: %s", run_dir)
    return _objective(summary, cfg, hc)


def _interrupted(exc: BaseException, run_dir: Path, multirun: bool, worker: bool) -> None:
    """A job stopped by SIGINT/SIGTERM: remove what it wrote, then end (or re-raise for the basic
    launcher's parent, which removes what its other jobs left)."""
    kept = discard(run_dir)
    if multirun and not worker:
        raise exc
    if not worker:  # a worker's parent prints the one line for the whole multirun
        signals.note_only()
        print(f"kvbench: {signals.what(exc)}; {kept}", file=sys.stderr)
    sys.exit(signals.exit_code(exc))


def _nothing_served(summary: dict, run_dir: Path) -> str | None:
    """The loud line of a run that finished no request (it exits 2; its files stay, for the reasons)."""
    if summary.get("num_finished") or not summary.get("num_rejected"):
        return None
    reason = ""
    try:
        reasons = pd.read_parquet(run_dir / "requests.parquet", columns=["reason"])["reason"].dropna()
        reason = f" (first reason: {reasons.iloc[0]})" if len(reasons) else ""
    except (OSError, ValueError, KeyError, ImportError):
        pass
    return (f"all {summary['num_rejected']} requests were rejected{reason}; the run measured nothing "
            f"(kept in {run_dir})")


def _objective(summary: dict, cfg: DictConfig, hc):
    """The sweeper's value of this run: its optimized_metric; NaN where the run has none, or under
    Optuna a JobFailed (a NaN would make optuna 2.x raise and end the study)."""
    metric = str(cfg.get("optimized_metric") or "request_throughput")
    value = summary.get(metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    if "optuna" in str(hc.sweeper.get("_target_", "")).lower():
        return JobFailed(f"the run reports no {metric}", str(hc.job.override_dirname))
    return float("nan")


def error_line(exc: BaseException) -> str:
    """The first line of an error, its type where it has no text; names an unexpected type."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, _errors() + (OSError,)):
        return first or type(exc).__name__
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def job_failed(hc, line: str):
    """Report a failed sweep job in one line and return its JobFailed marker."""
    overrides = str(hc.job.override_dirname)
    print(f"kvbench: error: job {hc.job.num} ({overrides or 'no overrides'}): {line}; nothing was kept",
          file=sys.stderr)
    record_failure(Path(hc.sweep.dir), int(hc.job.num), overrides, line)
    return JobFailed(line, overrides)


def _finish_logger(logger, exit_code: int) -> None:
    if logger is not None:
        logger.finish(exit_code=exit_code)


def main(task_function: Callable[[DictConfig], float | None]) -> None:
    """The ``kvbench`` command: exit 0, 1 (a sweep job failed), 2 (bad input) or 130/143 (a signal).
    Hydra runs ``task_function`` as its ``@hydra.main`` function (``kvbench.app`` passes its own, so
    that Hydra names the job, and its log, ``app``)."""
    signals.install_run_handlers()
    if signals.is_command():
        atexit.register(_last_word)  # registered before Hydra's and joblib's, so it runs after them
    try:
        with quiet_libraries("kvbench"):  # a library's warning is no line of the user's (Hydra's search path)
            code = _main(task_function)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (KeyboardInterrupt, Terminated) as exc:  # raised where no handler below was waiting
        signals.note_only()
        print(f"kvbench: {signals.what(exc)}; {_stop_and_clean()}", file=sys.stderr)
        code = signals.exit_code(exc)
    signals.note_only()
    _EXIT["code"] = code = _signal_wins(code)
    sys.exit(code)


_EXIT: dict[str, int] = {}  # the status main chose, for _last_word


def _signal_wins(code: int) -> int:
    """A signal noted but swallowed on the way (a library turned it into another error, or
    printed and dropped it): the process still ends as interrupted, in one line."""
    sig = signals.received()
    if sig is None or code in signals.EXIT_CODES.values():
        return code
    print(f"kvbench: {signals.what(signals.as_exception(sig))}; {_stop_and_clean()}", file=sys.stderr)
    return signals.EXIT_CODES[sig]


def _last_word() -> None:
    """At exit, after every other exit handler: a signal that came after main chose its status."""
    code = _EXIT.get("code")
    sig = signals.received()
    if code is None or sig is None or code in signals.EXIT_CODES.values():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(2, f"kvbench: {signals.what(signals.as_exception(sig))} as it exited; "
                "what it had finished is kept\n".encode())
    os._exit(signals.EXIT_CODES[sig])


def _main(task_function: Callable[[DictConfig], float | None]) -> int:
    signals.mark_main_process()
    PINNED_IDS.update(run=new_run_id(), sweep=new_run_id())
    try:
        error = precheck(sys.argv[1:], task_function)
    except (KeyboardInterrupt, Terminated) as exc:
        signals.note_only()
        print("kvbench: interrupted before the run started; nothing was written", file=sys.stderr)
        return signals.exit_code(exc)
    if signals.received() is not None:  # a signal the checks swallowed or turned into another error
        signals.note_only()
        print("kvbench: interrupted before the run started; nothing was written", file=sys.stderr)
        return signals.EXIT_CODES[signals.received()]
    if not error and PLANNED and not PLANNED["multirun"]:
        error = _claim(PLANNED["dirs"][0])
    if error:
        print(f"kvbench: error: {error}", file=sys.stderr)
        return 2
    for note in NOTES:
        print(f"kvbench: note: {note}", file=sys.stderr)
    if ADDED_OVERRIDES:  # e.g. the Ray launcher joining a running cluster
        print(f"kvbench: note: added {' '.join(ADDED_OVERRIDES)} (the launcher's default does not run here)",
              file=sys.stderr)
        sys.argv.extend(ADDED_OVERRIDES)
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what fails outside a job; one line below
    try:
        hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(task_function)()
    except (KeyboardInterrupt, Terminated) as exc:  # outside a job: Hydra's start-up, a multirun parent
        signals.note_only()
        print(f"kvbench: {signals.what(exc)}; {_stop_and_clean()}", file=sys.stderr)
        return signals.exit_code(exc)
    except Exception as exc:  # e.g. a full disk as Hydra writes the next job's .hydra/ files
        if os.environ.get("KVBENCH_TRACEBACK") == "1":
            raise
        if signals.received() is not None:  # the error is what a signal left behind
            return _signal_wins(1)
        signals.note_only()
        print(f"kvbench: error: {error_line(exc)}; {_clean_after_hydra()}", file=sys.stderr)
        return 2 if isinstance(exc, _errors() + (OSError, ImportError)) else 1
    finally:
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return 1 if FailedJobs.failed else 0


def _claim(run_dir: Path) -> str | None:
    """Claim the single run's dir (``kvbench.run.rundir.claim_run_dir``); the one-line error, or None."""
    with signals.held():  # a signal now is one line after the claim, which cleanup then removes
        try:
            claim_run_dir(run_dir)
        except ConfigError as exc:
            return str(exc)
    return None


def _clean_after_hydra() -> str:
    """After Hydra itself failed (a full disk as it wrote ``.hydra/``): remove what this process
    made for runs that did not finish; finished runs stay."""
    with signals.held():
        if not PLANNED:
            return "nothing was kept"
        planned = PLANNED["dirs"][0]
        return discard_sweep(planned) if PLANNED["multirun"] else discard(planned)


def _stop_and_clean() -> str:
    """After a signal outside a job: stop the launcher's workers, remove what unfinished jobs left."""
    with signals.held():
        stopped = signals.stop_children()
        if not PLANNED:
            return "nothing was kept"
        planned = PLANNED["dirs"][0]
        kept = discard_sweep(planned) if PLANNED["multirun"] else discard(planned)
    return f"{stopped} worker(s) stopped; {kept}" if stopped else kept
