"""What a kvbench process made on disk, and the only things its cleanup may remove.

The pre-check (``check_output_dirs``) refuses, before Hydra writes anything, a run or sweep dir
that is ``/``, the cwd or a folder above it, an existing file, or an existing folder that is not
empty (a finished run, a user's folder: Hydra would write ``.hydra/`` into it), and a sweep
subdir that leaves the sweep dir. So a run dir did not exist before the process, or was empty.

``KVBENCH_KEEP_DIR`` (set before Hydra starts, inherited by launcher workers) names the deepest
folder on the way to the run (or sweep) dir that existed before the process: cleanup never
removes it or anything above it. ``discard`` removes only the files kvbench and Hydra write
(``OUTPUTS``), then each folder below the keep dir that is left empty; a file it does not know
stays, and so does its folder. A finished run (``summary.json``) is never touched.

A single run claims its dir before Hydra starts (``claim_run_dir``: ``.running`` created
exclusively and locked at once, its record written), so two processes given the same
``hydra.run.dir`` at once cannot share it, and ``--clean`` never takes a claimed dir for dead.

``.running`` holds a JSON record (run id, pid, host, whether the process made the run dir) under
an exclusive ``flock`` for the life of the run; ``is_dead_run`` is true only for a record that
kvbench wrote whose lock is free, which is what ``kvbench-results --clean`` needs to remove a dir.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
from fnmatch import fnmatch
from pathlib import Path

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from kvbench.config.errors import ConfigError

KEEP_ENV = "KVBENCH_KEEP_DIR"
JOBS_DIR = ".jobs"  # in a sweep dir: the multirun's start record and one record per job (*.json)
# in the sweep's .jobs/ (not *.json: those are job records): when the multirun began, how many jobs
START_FILE = "multirun.start"
RUNNING_FILE = ".running"
SUMMARY_FILE = "summary.json"

# Files a run writes into its dir: relative fnmatch patterns; one without ``/`` matches top-level
# names only, ``wandb/*`` anything under wandb/.
OUTPUTS: tuple[str, ...] = (
    ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",  # Hydra, before the job
    "*.log",  # Hydra's job log (app.log)
    RUNNING_FILE, "steps.parquet", "requests.parquet", "memmap.npz",
    ".*.tmp", "*.tmp.npz",  # atomic writes cut short
    "figures/memory_over_time.png", "wandb/*",
)  # fmt: skip


# ----------------------------------------------------------------------------- pre-check


def _refuse(key: str, path: Path, cwd: Path) -> None:
    """Raise ConfigError if the run/sweep dir ``path`` could make Hydra or cleanup touch user files."""
    if path == Path(path.anchor):
        raise ConfigError(f"{key}: {path} is the file-system root; give a new folder for the run")
    if path == cwd or path in cwd.parents:
        raise ConfigError(f"{key}: {path} is the working directory or a folder above it; give a new folder")
    if path.is_symlink() or path.exists():
        if not path.is_dir():
            raise ConfigError(f"{key}: {path} exists and is not a folder")
        if (path / SUMMARY_FILE).exists():
            raise ConfigError(f"{key}: {path} already holds a finished run; give a new directory")
        if any(path.iterdir()):
            raise ConfigError(f"{key}: {path} already exists and is not empty; give a new or empty folder")


def _resolved(cfg, key: str) -> str:
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}: cannot resolve it ({str(exc).splitlines()[0]})") from None
    if value is None or not str(value).strip():
        raise ConfigError(f"{key}: empty; give a folder")
    return str(value)


def check_output_dirs(cfg, multirun: bool, cwd: Path | None = None) -> Path:
    """Check hydra.run.dir (a single run) or hydra.sweep.dir and hydra.sweep.subdir (a multirun) of a
    config composed with its Hydra node; return the folder Hydra will create (run or sweep dir)."""
    cwd = (cwd or Path.cwd()).resolve()
    if not multirun:
        run_dir = (cwd / Path(_resolved(cfg, "hydra.run.dir")).expanduser()).resolve()
        _refuse("hydra.run.dir", run_dir, cwd)
        return run_dir
    sweep_dir = (cwd / Path(_resolved(cfg, "hydra.sweep.dir")).expanduser()).resolve()
    _refuse("hydra.sweep.dir", sweep_dir, cwd)
    with open_dict(cfg):  # a job's number and id exist only once the launcher runs it
        cfg.hydra.job.num, cfg.hydra.job.id = 0, "0"
    subdir = Path(_resolved(cfg, "hydra.sweep.subdir"))
    if subdir.is_absolute() or ".." in subdir.parts or (sweep_dir / subdir).resolve() == sweep_dir:
        raise ConfigError(f"hydra.sweep.subdir: {subdir} must name a folder inside hydra.sweep.dir "
                          "(relative, without '..')")
    return sweep_dir


def keep_dir_for(planned: Path) -> Path:
    """The deepest folder on the way to ``planned`` that exists now (``planned`` itself if it does)."""
    folder = planned
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _keep_dir(run_dir: Path) -> Path:
    """The folder cleanup stops at: KVBENCH_KEEP_DIR, or the run dir itself when it is unknown."""
    given = os.environ.get(KEEP_ENV)
    return Path(given).resolve() if given else run_dir


def made_by_this_process(run_dir: Path) -> bool:
    """Whether the run dir lies below the keep dir (it did not exist when the process started)."""
    run_dir = run_dir.resolve()
    return _keep_dir(run_dir) in run_dir.parents


# ----------------------------------------------------------------------------- cleanup


def is_output(relative: str) -> bool:
    """Whether a path relative to the run dir is one that kvbench or Hydra writes."""
    return any(fnmatch(relative, pattern) for pattern in OUTPUTS if ("/" in pattern) == ("/" in relative)
               or pattern.endswith("/*"))


def remove_outputs(run_dir: Path) -> list[Path]:
    """Remove the files of ``OUTPUTS`` under run_dir and its sub-folders left empty; the files left."""
    left: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(run_dir, topdown=False):
        folder = Path(dirpath)
        for name in filenames:
            path = folder / name
            if not path.is_symlink() and is_output(path.relative_to(run_dir).as_posix()):
                path.unlink(missing_ok=True)
            else:
                left.append(path)
        for name in dirnames:
            sub = folder / name
            if not sub.is_symlink():
                try:
                    sub.rmdir()
                except OSError:
                    pass
            else:
                left.append(sub)
    return left


def discard(run_dir: Path) -> str:
    """Remove an unfinished run's outputs and the empty folders this process made for it; what
    happened, in words for the one-line message."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY_FILE).exists():
        return f"the finished run stays in {run_dir}"
    if not run_dir.is_dir():
        return "nothing was kept"
    left = remove_outputs(run_dir)
    run_abs, cwd = run_dir.resolve(), Path.cwd().resolve()
    keep = _keep_dir(run_abs)
    folder = run_abs
    while keep in folder.parents and folder != cwd and folder not in cwd.parents:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent
    if left:
        return f"its outputs were removed; {len(left)} file(s) kvbench did not write stay in {run_dir}"
    return "nothing was kept"


SWEEP_OUTPUTS = ("multirun.yaml",)  # what a launcher writes into the sweep dir itself
JOB_RECORDS = (START_FILE, "*.json", ".*.tmp")  # what kvbench writes into the sweep's JOBS_DIR


def _discard_job_records(jobs_dir: Path) -> None:
    """Remove kvbench's records of a sweep none of whose runs finished, and their folder if
    that empties it."""
    if not jobs_dir.is_dir() or jobs_dir.is_symlink():
        return
    for path in jobs_dir.iterdir():
        if path.is_file() and not path.is_symlink() and any(fnmatch(path.name, p) for p in JOB_RECORDS):
            path.unlink(missing_ok=True)
    try:
        jobs_dir.rmdir()
    except OSError:
        pass  # something else is in it: it stays


def discard_sweep(sweep_dir: Path) -> str:
    """After a multirun stopped (its workers gone): remove every unfinished job dir of the sweep;
    the sweep dir itself too when no finished run is left in it. What happened, in words."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return "nothing was kept"
    finished = removed = 0
    for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.is_symlink()):
        if (job / SUMMARY_FILE).exists():
            finished += 1
        elif job.name != ".submitit":
            discard(job)
            removed += not job.exists()
    if finished:
        return f"{finished} finished run(s) kept in {sweep_dir}; {removed} unfinished job dir(s) removed"
    _discard_job_records(sweep_dir / JOBS_DIR)
    if all(p.name in SWEEP_OUTPUTS for p in sweep_dir.iterdir()):
        for name in SWEEP_OUTPUTS:
            (sweep_dir / name).unlink(missing_ok=True)
        discard(sweep_dir)
    return "no run had finished; nothing was kept" if not sweep_dir.exists() else \
        f"no run had finished; files kvbench did not write stay in {sweep_dir}"


# ----------------------------------------------------------------------------- the claim


def claim_run_dir(run_dir: Path) -> None:
    """Make a single run's dir ours before Hydra writes into it: create it (and its parents) and
    then ``.running`` exclusively, so that of two processes given the same ``hydra.run.dir`` at
    once exactly one goes on; the other gets a ConfigError and has written nothing in it."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        pass  # an empty folder the pre-check accepted, or one the other process just made
    except OSError as exc:
        raise ConfigError(f"hydra.run.dir: cannot create {run_dir} ({exc.strerror})") from None
    try:
        fd = os.open(run_dir / RUNNING_FILE, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigError(f"hydra.run.dir: {run_dir} is taken by another kvbench run that started at the same "
                          "time; give each run its own directory") from None
    except OSError as exc:
        discard(run_dir)
        raise ConfigError(f"hydra.run.dir: cannot create {run_dir} ({exc.strerror})") from None
    handle = open(fd, "a+")
    try:
        _CLAIMED[run_dir.resolve()] = _lock_and_record(handle, run_dir, "")
    except OSError as exc:  # a full disk: the claim goes, with the folders it made
        try:
            handle.close()
        except OSError:
            pass
        discard(run_dir)
        raise ConfigError(f"hydra.run.dir: cannot write in {run_dir} ({exc.strerror})") from None


_CLAIMED: dict[Path, object] = {}  # run dir -> its locked ``.running``, from the claim to the run


# ----------------------------------------------------------------------------- the live-run lock


def hold_run_lock(run_dir: Path, run_id: str):
    """Lock ``<run_dir>/.running`` for the life of the process and write kvbench's record into it
    (the claim's handle, already locked, when this process claimed the dir)."""
    handle = _CLAIMED.pop(Path(run_dir).resolve(), None) or open(run_dir / RUNNING_FILE, "a+")
    return _lock_and_record(handle, run_dir, run_id)


def _lock_and_record(handle, run_dir: Path, run_id: str):
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    record = {"kvbench_run": run_id, "pid": os.getpid(), "host": socket.gethostname(),
              "made_dir": made_by_this_process(run_dir)}
    handle.truncate(0)
    handle.write(json.dumps(record) + "\n")
    handle.flush()
    return handle


def run_record(run_dir: Path) -> dict | None:
    """The record in ``.running`` if kvbench wrote it, else None (missing, empty, a user's file)."""
    try:
        record = json.loads((run_dir / RUNNING_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("kvbench_run"), str) else None


def is_dead_run(run_dir: Path) -> bool:
    """A run dir that kvbench made for a run whose process is gone (its lock is free)."""
    record = run_record(run_dir)
    if record is None or record.get("made_dir") is not True or (run_dir / SUMMARY_FILE).exists():
        return False
    try:
        with open(run_dir / RUNNING_FILE, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    except (BlockingIOError, OSError):
        return False
    return True
