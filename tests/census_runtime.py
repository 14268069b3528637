"""The runtime census of issue 31: sweeps, trace records, signals, run-dir claims, full disks,
W&B leftovers and optional extras that are absent. Every case knows its right outcome.

Outcomes: ``right``; ``silent`` (exit 0 or a built workload where it must fail, a wrong value, a
file left behind after "nothing was kept"); ``traceback``; ``lost`` (a signal that did not end
the run, two runs in one directory, an index row without its run); ``unclear`` (a non-zero exit
that is not the one line and code asked for); ``refused valid`` (a valid input refused).

Two kinds of case:

- ``TRACE_CASES`` and ``WANDB_CASES`` run in-process (``run_inprocess_case``): a crafted trace
  file through ``build_workload``, a W&B logger started and failed;
- ``PROCESS_CASES`` run real ``python -m kvbench.app`` processes (``run_process_case``): multirun
  exit codes under three launchers, signals at random moments, two runs racing for one run
  dir, a full tmpfs, W&B left behind by an interrupted run, wandb or submitit absent.

``python tests/census_runtime.py`` (with ``PYTHONPATH`` at the checkout to try) prints the
in-process outcomes as JSON; ``scripts/runtime_census.py`` runs everything against a checkout.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_MODEL_LEN = 2048
N_RECORDS = 12

# -- trace records ------------------------------------------------------------------------------


def _mooncake_records() -> list[dict[str, Any]]:
    return [{"timestamp": i * 100, "input_length": 600, "output_length": 20, "hash_ids": [i, i + 1]}
            for i in range(N_RECORDS)]


def _azure_rows() -> list[dict[str, str]]:
    return [{"arrived_at": f"{i * 0.1:.1f}", "num_prefill_tokens": "600", "num_decode_tokens": "20"}
            for i in range(N_RECORDS)]


def write_mooncake(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_azure(path: Path, rows: list[dict[str, str]], header: list[str] | None = None) -> Path:
    header = header or ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
    lines = [",".join(header)] + [",".join(r.get(h, "") for h in header) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


JSON_DEFECTS: dict[str, Any] = {"null": None, "string": "500", "bool": True, "nan": math.nan, "inf": math.inf,
                                "negative": -5, "zero": 0, "fraction": 12.5, "1e19": 1e19, "1e30": 1e30}
CSV_DEFECTS: dict[str, str] = {"null": "", "string": "abc", "bool": "true", "nan": "nan", "inf": "inf",
                               "negative": "-5", "zero": "0", "fraction": "12.5", "1e19": "1e19", "1e30": "1e30"}
REFUSE = "refuse"


@dataclass(frozen=True)
class TraceCase:
    case_id: str
    workload: str  # mooncake_conversation or azure_conv
    write: Callable[[Path], Path]  # makes the trace file in a scratch folder
    knobs: dict[str, Any]
    expect: str | Callable[[Any], bool]  # REFUSE, or a check of the built workload


def _count(n: int) -> Callable[[Any], bool]:
    return lambda w: len(w.requests) == n


def _rate(target: float) -> Callable[[Any], bool]:
    def check(w) -> bool:
        arrivals = [r.arrival_s for r in w.requests]
        span = arrivals[-1] - arrivals[0]
        return span > 0 and abs((len(arrivals) - 1) / span - target) < 1e-6 * target
    return check


def _context_left(prompt: int) -> Callable[[Any], bool]:
    return lambda w: any(r.prompt_len == prompt and r.output_len == MAX_MODEL_LEN - prompt for r in w.requests)


def _field_cases() -> list[TraceCase]:
    cases = []
    for field in ("timestamp", "input_length", "output_length"):
        for defect, value in JSON_DEFECTS.items():
            if field == "timestamp" and defect == "fraction":
                value = 550.5  # a fractional millisecond between its neighbours is a valid time
            expect: Any = _count(N_RECORDS) if (field, defect) == ("timestamp", "fraction") else REFUSE

            def write(tmp: Path, field=field, value=value) -> Path:
                records = _mooncake_records()
                records[5][field] = value
                return write_mooncake(tmp / "trace.jsonl", records)
            cases.append(TraceCase(f"mooncake-{field}-{defect}", "mooncake_conversation", write, {}, expect))

        def missing(tmp: Path, field=field) -> Path:
            records = _mooncake_records()
            del records[5][field]
            return write_mooncake(tmp / "trace.jsonl", records)
        cases.append(TraceCase(f"mooncake-{field}-missing", "mooncake_conversation", missing, {}, REFUSE))
    for field in ("arrived_at", "num_prefill_tokens", "num_decode_tokens"):
        for defect, text in CSV_DEFECTS.items():
            if field == "arrived_at" and defect == "fraction":
                text = "0.55"
            expect = _count(N_RECORDS) if (field, defect) == ("arrived_at", "fraction") else REFUSE

            def write_csv(tmp: Path, field=field, text=text) -> Path:
                rows = _azure_rows()
                rows[5][field] = text
                return write_azure(tmp / "trace.csv", rows)
            cases.append(TraceCase(f"azure-{field}-{defect}", "azure_conv", write_csv, {}, expect))

        def no_column(tmp: Path, field=field) -> Path:
            header = [h for h in ("arrived_at", "num_prefill_tokens", "num_decode_tokens") if h != field]
            return write_azure(tmp / "trace.csv", _azure_rows(), header)
        cases.append(TraceCase(f"azure-{field}-missing", "azure_conv", no_column, {}, REFUSE))
    return cases


def _mooncake_with(change: Callable[[list[dict[str, Any]]], None]) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        records = _mooncake_records()
        change(records)
        return write_mooncake(tmp / "trace.jsonl", records)
    return write


def _azure_with(change: Callable[[list[dict[str, str]]], None]) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        rows = _azure_rows()
        change(rows)
        return write_azure(tmp / "trace.csv", rows)
    return write


def _set(i: int, **values) -> Callable[[list[dict]], None]:
    def change(records: list[dict]) -> None:
        records[i].update(values)
    return change


def _overlong_prompt(records: list[dict]) -> None:
    records[5].update(input_length=5000, hash_ids=list(range(10)))


def _file_cases() -> list[TraceCase]:
    def text(name: str, content: str) -> Callable[[Path], Path]:
        def write(tmp: Path) -> Path:
            (tmp / name).write_text(content)
            return tmp / name
        return write

    swap = lambda records: records.__setitem__(slice(4, 6), records[5:3:-1])  # noqa: E731
    dup = lambda records: records.insert(6, dict(records[5]))  # noqa: E731
    moon, az = "mooncake_conversation", "azure_conv"
    return [
        TraceCase("mooncake-empty-file", moon, text("trace.jsonl", ""), {}, REFUSE),
        TraceCase("mooncake-blank-lines-only", moon, text("trace.jsonl", "\n \n\n"), {}, REFUSE),
        TraceCase("mooncake-not-an-object", moon, text("trace.jsonl", "[1, 2, 3]\n"), {}, REFUSE),
        TraceCase("azure-empty-file", az, text("trace.csv", ""), {}, REFUSE),
        TraceCase("azure-header-only", az, text("trace.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"),
                  {}, REFUSE),
        TraceCase("mooncake-unsorted-times", moon, _mooncake_with(swap), {}, REFUSE),
        TraceCase("azure-unsorted-times", az, _azure_with(swap), {}, REFUSE),
        TraceCase("mooncake-duplicate-record", moon, _mooncake_with(dup), {}, _count(N_RECORDS + 1)),
        TraceCase("azure-duplicate-row", az, _azure_with(dup), {}, _count(N_RECORDS + 1)),
        TraceCase("mooncake-target-rate", moon, _mooncake_with(lambda r: None), {"target_rate": 20.0}, _rate(20.0)),
        TraceCase("mooncake-target-rate-with-overlong-refused", moon, _mooncake_with(_overlong_prompt),
                  {"target_rate": 20.0}, _rate(20.0)),
        TraceCase("azure-target-rate-with-overlong-refused", az, _azure_with(_set(5, num_prefill_tokens="5000")),
                  {"target_rate": 20.0}, _rate(20.0)),
        TraceCase("azure-target-rate-with-first-overlong", az, _azure_with(_set(0, num_decode_tokens="5000")),
                  {"target_rate": 7.0}, _rate(7.0)),
        TraceCase("mooncake-overlong-output-clipped-to-context-left", moon, _mooncake_with(_set(5, output_length=10**9)),
                  {"overlong": "clip"}, _context_left(600)),
        TraceCase("azure-overlong-output-clipped-to-context-left", az,
                  _azure_with(_set(5, num_decode_tokens="1000000000")), {"overlong": "clip"}, _context_left(600)),
        TraceCase("mooncake-1e19-output-with-clip", moon, _mooncake_with(_set(5, output_length=1e19)),
                  {"overlong": "clip"}, REFUSE),
        TraceCase("azure-1e30-output-with-clip", az, _azure_with(_set(5, num_decode_tokens="1e30")),
                  {"overlong": "clip"}, REFUSE),
        TraceCase("mooncake-every-timestamp-null", moon, _mooncake_with(
            lambda records: [r.update(timestamp=None) for r in records]), {}, REFUSE),
        TraceCase("mooncake-first-timestamp-null", moon, _mooncake_with(_set(0, timestamp=None)), {}, REFUSE),
        TraceCase("mooncake-last-timestamp-null", moon, _mooncake_with(_set(N_RECORDS - 1, timestamp=None)), {},
                  REFUSE),
        TraceCase("mooncake-input-length-bool-true", moon, _mooncake_with(_set(5, input_length=True, hash_ids=[5])),
                  {}, REFUSE),
    ]


TRACE_CASES: list[TraceCase] = _field_cases() + _file_cases()


def run_trace_case(case: TraceCase, tmp: Path) -> dict[str, Any]:
    """Build the case's workload from its file; the outcome and the line (or what was built)."""
    from kvbench.workloads import WorkloadError, build_workload

    tmp.mkdir(parents=True, exist_ok=True)
    path = case.write(tmp)
    cfg = {"name": case.workload, "path": str(path), **case.knobs}
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            workload = build_workload(cfg, vocab_size=49152, max_model_len=MAX_MODEL_LEN, tokenizer_name=None)
    except WorkloadError as exc:
        line = str(exc)
        one_line = "\n" not in line.strip()
        if case.expect == REFUSE:
            return {"outcome": "right" if one_line else "unclear", "detail": line[:200]}
        return {"outcome": "refused valid", "detail": line[:200]}
    except Exception as exc:  # noqa: BLE001 - what the census counts
        return {"outcome": "traceback", "detail": f"{type(exc).__name__}: {exc}"[:200]}
    built = f"{len(workload.requests)} requests, outputs {sorted({r.output_len for r in workload.requests})[:4]}"
    if case.expect == REFUSE:
        return {"outcome": "silent", "detail": built}
    return {"outcome": "right" if case.expect(workload) else "silent", "detail": built}


# -- W&B leftovers, in-process ------------------------------------------------------------------


def _wandb_tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")} if root.exists() else set()


def wandb_failed_run(tmp: Path, where: str) -> dict[str, Any]:
    """A W&B logger started then finished as failed: no W&B folder it made may stay."""
    from kvbench.loggers.wandb_logger import WandbLogger

    os.environ.setdefault("WANDB_SILENT", "true")
    run_dir = tmp / "run"
    run_dir.mkdir(parents=True)
    (tmp / "mine").mkdir()
    (tmp / "mine" / "keep.txt").write_text("a user's file\n")
    logger_dir = {"run-dir": None, "new-nested": tmp / "logs" / "deep", "existing": tmp / "mine"}[where]
    before = _wandb_tree(tmp)
    logger = WandbLogger(dir=logger_dir)
    try:
        logger.start({"allocator": {"name": "paged"}}, run_id="20260101-000000-0000beef", name="census",
                     run_dir=run_dir)
        logger.finish(exit_code=1)
    except Exception as exc:  # noqa: BLE001
        return {"outcome": "traceback", "detail": f"{type(exc).__name__}: {exc}"[:200]}
    left = sorted(_wandb_tree(tmp) - before)
    if not (tmp / "mine" / "keep.txt").exists():
        return {"outcome": "lost", "detail": "a user's file was removed"}
    return {"outcome": "silent" if left else "right", "detail": f"left {left[:3]}"}


def wandb_finished_run_kept(tmp: Path) -> dict[str, Any]:
    """The other side: a run that finished keeps its W&B folder (for ``wandb sync``)."""
    from kvbench.loggers.wandb_logger import WandbLogger

    os.environ.setdefault("WANDB_SILENT", "true")
    run_dir = tmp / "run"
    run_dir.mkdir(parents=True)
    logger = WandbLogger(dir=tmp / "logs")
    logger.start({"allocator": {"name": "paged"}}, run_id="20260101-000000-0000beef", name="census", run_dir=run_dir)
    logger.finish(exit_code=0)
    runs = list((tmp / "logs" / "wandb").glob("offline-run-*"))
    return {"outcome": "right" if runs else "lost", "detail": f"{len(runs)} W&B run folder(s)"}


WANDB_CASES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "wandb-failed-run-in-run-dir": lambda tmp: wandb_failed_run(tmp, "run-dir"),
    "wandb-failed-run-new-logger-dir": lambda tmp: wandb_failed_run(tmp, "new-nested"),
    "wandb-failed-run-existing-logger-dir": lambda tmp: wandb_failed_run(tmp, "existing"),
    "wandb-finished-run-kept": wandb_finished_run_kept,
}


def run_inprocess_case(case_id: str, tmp: Path) -> dict[str, Any]:
    if case_id in WANDB_CASES:
        environ = dict(os.environ)
        try:
            result = WANDB_CASES[case_id](tmp)
        finally:  # a failed run stops W&B's service (kvbench.loggers.wandb_logger); later runs in this
            import wandb  # process need a fresh one, and the environment as it was

            try:
                wandb.teardown()
            except Exception:  # noqa: BLE001 -- the service is already gone
                pass
            os.environ.clear()
            os.environ.update(environ)
    else:
        result = run_trace_case(next(c for c in TRACE_CASES if c.case_id == case_id), tmp)
    return {"case": case_id, **result}


INPROCESS_IDS = [c.case_id for c in TRACE_CASES] + list(WANDB_CASES)


# -- real processes -----------------------------------------------------------------------------

BASE = ["progress=false", "logger=none"]
# A run that outlasts any wait before a signal (21 s measured; the signal tests wait up to 6 s): one
# sequence at a time, 3,000 x 1,024 decode steps (a batched run of 8,000 requests came to finish
# within 3 s).
LONG_WORKLOAD = ["workload.num_requests=3000", "workload.output_len=1024", "engine.max_num_seqs=1"]
LONG = [*BASE, *LONG_WORKLOAD]


def kvbench(root: Path, args: list[str], cwd: Path, extra_path: Path | None = None, **popen) -> subprocess.Popen:
    path = f"{extra_path}:{root}" if extra_path else str(root)
    env = dict(os.environ, PYTHONPATH=path, WANDB_MODE="offline", WANDB_SILENT="true", HYDRA_FULL_ERROR="0")
    env.pop("KVBENCH_TRACEBACK", None)
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def _lines(err: str) -> list[str]:
    return [ln for ln in err.strip().splitlines() if ln.strip()]


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()} \
        if folder.exists() else set()


def _half_runs(results: Path) -> list[str]:
    """Run dirs without summary.json, and index rows whose run is missing."""
    half = [str(d) for d in results.glob("runs/**/") if (d / ".running").exists() or
            (d.is_dir() and any(f.name.endswith(".parquet") for f in d.iterdir()) and not (d / "summary.json").exists())]
    index = results / "index.jsonl"
    for line in index.read_text().splitlines() if index.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            half.append("a torn index row")
            continue
        run = row.get("run_dir") or row.get("path")
        if run and not (results / run / "summary.json").exists() and not (Path(run) / "summary.json").exists():
            half.append(f"index row without its run {run}")
    return half


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -9, err + "\n(hang)"
    return proc.returncode, err


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def signal_case(root: Path, tmp: Path, sig: int, delay: float, args: list[str] | None = None) -> dict[str, Any]:
    """A run signalled ``delay`` s after kvbench's own code runs (its first handler is in place):
    one line, 130/143, no half run, no index row without its run, nothing in the cwd."""
    results = tmp / "results"
    cwd = tmp / "cwd"
    proc = kvbench(root, [*(args or LONG), f"results_dir={results}"], cwd)
    deadline = time.time() + 60
    while not _catches_sigterm(proc.pid) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    sent = proc.poll() is None
    proc.send_signal(sig)
    code, err = _finish(proc)
    lines = _lines(err)
    expect = 130 if sig == signal.SIGINT else 143
    half = _half_runs(results)
    if "Traceback" in err:
        outcome = "traceback"
    elif code == 0 and sent:
        outcome = "lost"
    elif half or _files(cwd):
        outcome = "lost" if half else "silent"
    elif code == expect and len(lines) == 1 and lines[0].startswith("kvbench"):
        outcome = "right"
    elif not sent:
        outcome = "right"  # it had ended before the signal: nothing to judge
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": code, "detail": (lines[-1] if lines else "")[:200],
            "half": half[:2], "lines": len(lines)}


def multirun_case(root: Path, tmp: Path, launcher: str, pools: str, failing: int) -> dict[str, Any]:
    """A sweep over ``engine.kv_cache_bytes``: a pool of 2e6 bytes serves nothing (every request is
    rejected); the sweep must exit 1 when any job failed, after every job ran and kept its row."""
    results = tmp / "results"
    jobs = len(pools.split(","))
    args = ["-m", f"hydra/launcher={launcher}", *BASE, "workload.num_requests=4", "model=smollm2-135m",
            f"engine.kv_cache_bytes={pools}", f"results_dir={results}"]
    if launcher == "joblib":
        args.append("hydra.launcher.n_jobs=2")
    code, err = _finish(kvbench(root, args, tmp / "cwd"))
    rows = len((results / "index.jsonl").read_text().splitlines()) if (results / "index.jsonl").exists() else 0
    if "Traceback" in err:
        outcome = "traceback"
    elif rows != jobs:
        outcome = "lost"
    elif code == (1 if failing else 0):
        outcome = "right"
    elif code == 0:
        outcome = "silent"
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": code, "detail": f"{rows} of {jobs} rows; " + (_lines(err) or [""])[-1][:150]}


def claim_race(root: Path, tmp: Path, racers: int, empty_dir: bool) -> dict[str, Any]:
    """``racers`` runs started together with one ``hydra.run.dir``: exactly one runs (exit 0), the
    others exit 2 in one line; one index row; the run dir holds that run's files."""
    results = tmp / "results"
    run_dir = tmp / "shared-run"
    if empty_dir:
        run_dir.mkdir(parents=True)
    procs = [kvbench(root, [*BASE, "workload.num_requests=4", f"results_dir={results}", f"hydra.run.dir={run_dir}"],
                     tmp / f"cwd{i}") for i in range(racers)]
    ends = [_finish(p) for p in procs]
    codes = sorted(code for code, _ in ends)
    rows = [json.loads(ln) for ln in (results / "index.jsonl").read_text().splitlines()] \
        if (results / "index.jsonl").exists() else []
    losers_ok = all(len(_lines(err)) == 1 and "hydra.run.dir" in err for code, err in ends if code == 2)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    if any("Traceback" in err for _, err in ends):
        outcome = "traceback"
    elif codes.count(0) > 1 or len(rows) > 1:
        outcome = "lost"
    elif codes == [0] + [2] * (racers - 1) and losers_ok and len(rows) == 1 \
            and rows[0].get("run_id") == summary.get("run_id"):
        outcome = "right"
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": codes, "detail": f"{len(rows)} index row(s); "
            + "; ".join((_lines(err) or [""])[-1][:80] for _, err in ends)}


def _mount_full(folder: Path, free_bytes: int = 4096) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        return False
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    os.truncate(folder / "filler", max(0, (folder / "filler").stat().st_size - free_bytes))
    return True


def disk_full_case(root: Path, tmp: Path, multirun: bool, free_bytes: int) -> dict[str, Any]:
    """A run (or sweep) dir on a file system with ``free_bytes`` left: one line, exit 2, and
    nothing of the run left on that file system."""
    mount = tmp / "full"
    if not _mount_full(mount, free_bytes):
        return {"outcome": "skipped", "detail": "cannot mount a tmpfs here (not root)"}
    try:
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        args = [*(["-m"] if multirun else []), *BASE, "workload.num_requests=4", f"results_dir={tmp / 'results'}",
                f"{key}={mount / 'out'}", *(["seed=0,1"] if multirun else [])]
        code, err = _finish(kvbench(root, args, tmp / "cwd"))
        left = sorted(_files(mount) - {"filler"}) + sorted(
            p.name for p in mount.iterdir() if p.is_dir())
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
    lines = _lines(err)
    if "Traceback" in err:
        outcome = "traceback"
    elif left:
        outcome = "silent"
    elif code == 2 and len(lines) == 1:
        outcome = "right"
    elif code == 0:
        outcome = "right" if multirun else "silent"  # a sweep whose dirs fit after all
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": code, "detail": f"left {left[:3]}; " + (lines[-1] if lines else "")[:150]}


def wandb_interrupted_case(root: Path, tmp: Path, sig: int) -> dict[str, Any]:
    """An offline W&B run in its own ``logger.dir``, interrupted mid-run: 130/143, one line, and
    neither the run dir nor a W&B run folder left."""
    logs = tmp / "wandb-logs"
    results = tmp / "results"
    proc = kvbench(root, ["progress=false", "logger=wandb", f"logger.dir={logs}", *LONG_WORKLOAD,
                          f"results_dir={results}"], tmp / "cwd")
    deadline = time.time() + 120
    while not list(results.glob("runs/*/*/.running")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    while not list(logs.glob("wandb/*run-*")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(sig)
    code, err = _finish(proc)
    left = sorted(_files(logs)) + [d.name for d in logs.rglob("*") if d.is_dir()]
    lines = _lines(err)
    if "Traceback" in err:
        outcome = "traceback"
    elif code == 0:
        outcome = "lost"
    elif left or _half_runs(results):
        outcome = "silent"
    elif code == (130 if sig == signal.SIGINT else 143) and len(lines) == 1:
        outcome = "right"
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": code, "detail": f"left {left[:3]}; " + (lines[-1] if lines else "")[:150]}


def absent_extra_case(root: Path, tmp: Path, module: str, args: list[str]) -> dict[str, Any]:
    """An optional extra that is not installed (an import that fails): one line, exit 2, nothing
    written under the results dir or the cwd."""
    shim = tmp / "shim"
    (shim / module).mkdir(parents=True)
    (shim / module / "__init__.py").write_text(f"raise ImportError('No module named {module}')\n")
    results = tmp / "results"
    code, err = _finish(kvbench(root, [*args, f"results_dir={results}"], tmp / "cwd", extra_path=shim))
    lines = _lines(err)
    written = sorted(_files(results)) + sorted(_files(tmp / "cwd"))
    if "Traceback" in err:
        outcome = "traceback"
    elif code == 0:
        outcome = "silent"
    elif written:
        outcome = "silent"
    elif code == 2 and len(lines) == 1 and lines[0].startswith("kvbench: error:"):
        outcome = "right"
    else:
        outcome = "unclear"
    return {"outcome": outcome, "exit": code, "detail": f"written {written[:2]}; " + (lines[-1] if lines else "")[:150]}


def _signal_cases(count: int, seed: int) -> dict[str, Callable[[Path, Path], dict[str, Any]]]:
    """Fixed start-up moments, ``count`` random delays of 0.6-1.6 s (seeded), later fixed moments."""
    cases: dict[str, Callable[[Path, Path], dict[str, Any]]] = {}
    for name, sig in (("sigint", signal.SIGINT), ("sigterm", signal.SIGTERM)):
        for delay in (0.0, 0.05, 0.2):
            cases[f"{name}-start-up-{delay:g}s"] = lambda r, t, sig=sig, d=delay: signal_case(r, t, sig, d)
    rng = random.Random(seed)
    for i in range(count):
        sig = rng.choice((signal.SIGINT, signal.SIGTERM))
        delay = round(rng.uniform(0.6, 1.6), 3)
        name = "sigint" if sig == signal.SIGINT else "sigterm"
        cases[f"{name}-random-{i}-{delay:g}s"] = lambda r, t, sig=sig, d=delay: signal_case(r, t, sig, d)
    for name, sig in (("sigint", signal.SIGINT), ("sigterm", signal.SIGTERM)):
        for delay in (2.5, 4.0, 6.0):  # past the imports on a busy machine: the pre-check, Hydra, the run
            cases[f"{name}-late-{delay:g}s"] = lambda r, t, sig=sig, d=delay: signal_case(r, t, sig, d)
    for name, sig in (("sigint", signal.SIGINT), ("sigterm", signal.SIGTERM)):
        cases[f"{name}-basic-multirun"] = lambda r, t, sig=sig: signal_case(
            r, t, sig, 1.5, ["-m", *LONG, "seed=0,1"])
    return cases


def process_cases(signal_count: int = 12, seed: int = 31) -> dict[str, Callable[[Path, Path], dict[str, Any]]]:
    cases: dict[str, Callable[[Path, Path], dict[str, Any]]] = {}
    for launcher in ("basic", "joblib", "submitit_local"):
        cases[f"multirun-{launcher}-one-job-fails"] = lambda r, t, l=launcher: multirun_case(r, t, l, "2e6,2e9", 1)
        cases[f"multirun-{launcher}-every-job-fails"] = lambda r, t, l=launcher: multirun_case(r, t, l, "2e6,3e6", 2)
    cases["multirun-basic-all-finish"] = lambda r, t: multirun_case(r, t, "basic", "2e9,3e9", 0)
    cases.update(_signal_cases(signal_count, seed))
    cases["claim-two-runs-one-new-dir"] = lambda r, t: claim_race(r, t, 2, empty_dir=False)
    cases["claim-two-runs-one-empty-dir"] = lambda r, t: claim_race(r, t, 2, empty_dir=True)
    cases["claim-three-runs-one-new-dir"] = lambda r, t: claim_race(r, t, 3, empty_dir=False)
    cases["disk-full-4k-run"] = lambda r, t: disk_full_case(r, t, False, 4096)
    cases["disk-full-0-run"] = lambda r, t: disk_full_case(r, t, False, 0)
    cases["disk-full-4k-multirun"] = lambda r, t: disk_full_case(r, t, True, 4096)
    cases["wandb-sigterm-mid-run"] = lambda r, t: wandb_interrupted_case(r, t, signal.SIGTERM)
    cases["wandb-sigint-mid-run"] = lambda r, t: wandb_interrupted_case(r, t, signal.SIGINT)
    cases["absent-wandb-logger"] = lambda r, t: absent_extra_case(r, t, "wandb", ["progress=false", "logger=wandb",
                                                                                  "workload.num_requests=4"])
    cases["absent-submitit-launcher"] = lambda r, t: absent_extra_case(
        r, t, "submitit", ["-m", "hydra/launcher=submitit_local", *BASE, "workload.num_requests=4", "seed=0,1"])
    return cases


if __name__ == "__main__":  # the in-process cases against the kvbench on PYTHONPATH, as JSON lines
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="census-runtime-"))
    for number, case_id in enumerate(INPROCESS_IDS):
        try:
            result = run_inprocess_case(case_id, scratch / str(number))
        except Exception as exc:  # noqa: BLE001 - a case that broke the harness on old code
            result = {"case": case_id, "outcome": "traceback", "detail": f"{type(exc).__name__}: {exc}"[:200]}
        print(json.dumps(result), flush=True)
