"""Try every bad input and fault of the reliability table and classify what kvbench does.

    PYTHONPATH=. python scripts/reliability_census.py [--root CHECKOUT] [--jobs 2] [--json OUT]

``--root`` is the checkout whose code runs (default: this one), so the same table can be tried
on an older commit. Each case runs as its own ``python -m kvbench.app`` process in a scratch
folder. Outcomes:

- ``clear error``: exit 2, one stderr line ``kvbench: error: ...``, nothing new on disk;
- ``traceback``: an uncaught exception (a Python or Hydra stack trace on stderr);
- ``unclear error``: a non-zero exit without a traceback but not one clear line;
- ``written on error``: it failed but left files (run dirs, logs, W&B runs);
- ``silent result``: exit 0 on bad input, or a run that finished with a wrong or unreadable result;
- ``data lost``: a run's files missing, shared or overwritten, a torn or unreadable index;
- ``ok``: a fault case (concurrency, interrupts, kill -9) handled correctly.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import reliability_cases as rc  # noqa: E402

BASE = {"progress": "false", "logger": "none", "workload.num_requests": "4"}
MEMORY_LIMIT = 6 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def with_base(args: list[str], results: Path) -> list[str]:
    keys = {a.lstrip("+").split("=", 1)[0] for a in args}
    base = [f"{k}={v}" for k, v in {**BASE, "results_dir": str(results)}.items() if k not in keys]
    flags = [a for a in args if a.startswith("-")]  # Hydra wants -m before the overrides
    return [*flags, *base, *[a for a in args if not a.startswith("-")]]


def kvbench(root: Path, args: list[str], cwd: Path, timeout: float = 120, **popen) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(root), WANDB_MODE="offline", WANDB_SILENT="true", HYDRA_FULL_ERROR="0")
    return subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_limit_memory, **popen)


def snapshot(folder: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        found.update(os.path.join(dirpath, name) for name in (*dirnames, *filenames))
    return found


def plant(tmp: Path) -> dict[Path, bytes]:
    """A user's files in the cwd and the folder above it, which no case may remove or change."""
    files = {tmp / "cwd" / "mine.txt": b"the user's notes\n", tmp / "above-cwd.txt": b"the user's data\n"}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def removed(planted: dict[Path, bytes]) -> list[str]:
    return [str(p) for p, data in planted.items() if not p.is_file() or p.read_bytes() != data]


def classify_error(code: int | None, stderr: str, new_files: set[str]) -> str:
    if code is None:
        return "hang"
    if "Traceback" in stderr or "HYDRA_FULL_ERROR" in stderr or "Error executing job" in stderr:
        return "traceback"
    if code == 0:
        return "silent result"
    if new_files:
        return "written on error"
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    if code == 2 and len(lines) == 1 and lines[0].startswith("kvbench: error:"):
        return "clear error"
    return "unclear error"


def run_table_case(root: Path, case: tuple[str, list[str], str | None], scratch: Path) -> dict:
    case_id, args, setup = case
    tmp = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
    cwd = tmp / "cwd"
    cwd.mkdir()
    try:
        if setup:
            try:
                rc.SETUPS[setup](tmp)
            except (subprocess.CalledProcessError, OSError) as exc:
                return {"case": case_id, "outcome": "skipped", "detail": f"setup failed: {exc}"}
        full = with_base(rc.expand(args, tmp), tmp / "results")
        planted = plant(tmp)
        before = snapshot(tmp)
        if case_id in rc.UNSAFE_TO_RUN:
            return probe_precheck(root, case_id, full, cwd)
        proc = kvbench(root, full, cwd)
        try:
            _, err = proc.communicate(timeout=120)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            code = None
        new = {p for p in snapshot(tmp) - before if "__pycache__" not in p}
        outcome = "user files removed" if removed(planted) else classify_error(code, err, new)
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [""]
        return {"case": case_id, "outcome": outcome, "exit": code, "stderr_last": last[0][:200],
                "new_files": sorted(new)[:3]}
    finally:
        rc.teardown(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def probe_precheck(root: Path, case_id: str, args: list[str], cwd: Path) -> dict:
    """The checkout's pre-check alone, in a probe process: a case that it accepts is not run."""
    code = ("import sys\ntry:\n    from kvbench.run.precheck import precheck\n"
            "except ImportError:  # a checkout from before kvbench/run/\n    from kvbench.app import precheck\n"
            "print(precheck(sys.argv[1:]) or '')")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)), timeout=300)
    error = proc.stdout.strip()
    if proc.returncode == 0 and error and len(error.splitlines()) == 1:
        return {"case": case_id, "outcome": "clear error", "exit": 2, "stderr_last": f"kvbench: error: {error}"[:200]}
    return {"case": case_id, "outcome": "silent result", "exit": proc.returncode,
            "stderr_last": "the pre-check accepts it; not run (it would write into /)"}


# -- fault cases: concurrency, interrupts, kill -9, strict JSON ---------------------------------


def _index_rows(results: Path) -> tuple[list[dict], bool]:
    """The index rows and whether every line is strict JSON."""
    index = results / "index.jsonl"
    if not index.exists():
        return [], True
    rows, strict = [], True

    def refuse(token: str):
        raise ValueError(token)

    for line in index.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line, parse_constant=refuse))
        except ValueError:
            strict = False
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows, strict


def _rows_point_at_their_own_runs(results: Path, rows: list[dict]) -> bool:
    dirs = [r.get("run_dir") for r in rows]
    if len(set(dirs)) != len(dirs):
        return False
    for row in rows:
        summary = results / row["run_dir"] / "summary.json"
        if not summary.is_file() or json.loads(summary.read_text()).get("run_id") != row["run_id"]:
            return False
    return True


def concurrent_runs(root: Path, scratch: Path) -> dict:
    results = scratch / "concurrent"
    allocators = ["paged", "buddy", "orca-max", "paged_prefix", "orca-pow2", "contiguous"]
    procs = [kvbench(root, with_base([f"allocator={a}", "workload.num_requests=20"], results), scratch)
             for a in allocators]
    codes = [p.wait(timeout=300) for p in procs]
    rows, strict = _index_rows(results)
    if any(codes) or len(rows) != len(allocators):
        return {"case": "concurrent-6-runs", "outcome": "data lost", "detail": f"exits {codes}, {len(rows)} rows"}
    ok = _rows_point_at_their_own_runs(results, rows)
    return {"case": "concurrent-6-runs", "outcome": "ok" if ok else "data lost",
            "detail": f"{len({r['run_dir'] for r in rows})} run dirs for {len(rows)} rows"}


def concurrent_sweeps(root: Path, scratch: Path) -> dict:
    results = scratch / "sweeps"
    procs = [kvbench(root, with_base(["-m", "allocator=paged,buddy", f"seed={s}"], results), scratch)
             for s in (1, 2, 3)]
    codes = [p.wait(timeout=300) for p in procs]
    rows, _ = _index_rows(results)
    ok = not any(codes) and len(rows) == 6 and _rows_point_at_their_own_runs(results, rows)
    return {"case": "concurrent-3-sweeps", "outcome": "ok" if ok else "data lost",
            "detail": f"exits {codes}, {len(rows)} rows, {len({r.get('run_dir') for r in rows})} dirs"}


def strict_index(root: Path, scratch: Path) -> dict:
    results = scratch / "strict"
    proc = kvbench(root, with_base(["workload.request_rate=inf"], results), scratch)
    proc.communicate(timeout=120)
    rows, strict = _index_rows(results)
    ok = proc.returncode == 0 and rows and strict
    return {"case": "index-strict-json", "outcome": "ok" if ok else "silent result",
            "detail": "strict" if strict else "Infinity/NaN in the index"}


def _long_run(results: Path) -> list[str]:
    return with_base(["workload.num_requests=3000", "engine.kv_cache_bytes=2e9"], results)


def _incomplete_dirs(results: Path) -> list[Path]:
    """Run dirs without summary.json that kvbench-results would not know to ignore."""
    runs = results / "runs"
    if not runs.exists():
        return []
    leaves = [Path(d) for d, sub, files in os.walk(runs) if ".hydra" in sub]
    return [d for d in leaves if not (d / "summary.json").exists() and not (d / "INCOMPLETE").exists()]


def interrupt(root: Path, scratch: Path, sig: int, expect: int, name: str) -> dict:
    results = scratch / name
    proc = kvbench(root, _long_run(results), scratch)
    time.sleep(6)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return {"case": name, "outcome": "hang"}
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    left = _incomplete_dirs(results)
    if "Traceback" in err:
        outcome = "traceback"
    elif left:
        outcome = "written on error"
    elif proc.returncode == expect and len(lines) == 1:
        outcome = "ok"
    else:
        outcome = "unclear error"
    return {"case": name, "outcome": outcome, "exit": proc.returncode, "stderr_last": (lines or [""])[-1][:200],
            "detail": f"{len(left)} half-run dirs"}


def kill9(root: Path, scratch: Path, trials: int = 3) -> dict:
    """kill -9 at random points; the index must stay strict and whole, a rerun must work, and
    ``kvbench-results --clean --reindex`` must leave only finished runs, all in the index."""
    results = scratch / "kill9"
    rng = random.Random(0)
    for _ in range(trials):
        proc = kvbench(root, with_base(["workload.num_requests=300"], results), scratch)
        time.sleep(rng.uniform(1.0, 4.0))
        proc.kill()
        proc.wait()
    proc = kvbench(root, with_base(["workload.num_requests=10"], results), scratch)
    proc.communicate(timeout=120)
    rows, strict = _index_rows(results)
    complete = [Path(d) for d, _, files in os.walk(results / "runs") if "summary.json" in files]
    reindex = subprocess.run([sys.executable, "-m", "kvbench.results", "--index", str(results / "index.jsonl"),
                              "--clean", "--reindex"], env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True)
    rows_after, strict_after = _index_rows(results)
    ok = (proc.returncode == 0 and strict and reindex.returncode == 0 and strict_after
          and len(rows_after) == len(complete) and not _incomplete_dirs(results))
    return {"case": "kill-9-then-rerun-and-reindex", "outcome": "ok" if ok else "data lost",
            "detail": f"rerun exit {proc.returncode}, {len(rows)} rows / {len(complete)} finished dirs, "
                      f"reindex exit {reindex.returncode}, {len(_incomplete_dirs(results))} unmarked half-run dirs"}


def gpu_count_recorded(root: Path, scratch: Path) -> dict:
    results = scratch / "gpucount"
    proc = kvbench(root, with_base(["gpu.count=2"], results), scratch)
    proc.communicate(timeout=120)
    rows, _ = _index_rows(results)
    ok = proc.returncode == 0 and rows and rows[-1].get("gpu_count") == 2
    return {"case": "gpu-count-2-recorded", "outcome": "ok" if ok else "silent result"}


# -- new fault classes: signals everywhere, multirun parents, the results tool's files ------------


def _one_line(err: str) -> bool:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return len(lines) == 1 and lines[0].startswith("kvbench")


def _wait_for(folder: Path, pattern: str, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while not list(folder.glob(pattern)) and time.time() < deadline:
        time.sleep(0.1)
    return bool(list(folder.glob(pattern)))


def _signal_outcome(name: str, proc: subprocess.Popen, expect: int, planted: dict, scratch: Path,
                    keep: set[str]) -> dict:
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # it, or workers holding its pipes, ran on
        _kill_tree(proc.pid)
        proc.communicate()
        return {"case": name, "outcome": "hang"}
    left = {p for p in snapshot(scratch) - keep if "__pycache__" not in p}
    if removed(planted):
        outcome = "user files removed"
    elif "Traceback" in err:
        outcome = "traceback"
    elif left:
        outcome = "written on error"
    elif proc.returncode == expect and _one_line(err):
        outcome = "ok"
    else:
        outcome = "unclear error"
    return {"case": name, "outcome": outcome, "exit": proc.returncode,
            "stderr_last": ([ln for ln in err.strip().splitlines() if ln.strip()] or [""])[-1][:200],
            "detail": f"{len(left)} files left, e.g. {sorted(left)[:2]}"}


def signal_at(root: Path, scratch: Path, sig: int, delay: float, name: str, args: list[str] | None = None,
              wait: str | None = None, group: bool = False) -> dict:
    """One kvbench process (a single run or a multirun) signalled ``delay`` s after start, or after
    ``wait`` (a glob under the cwd) appears; one line, 130/143, nothing left, no user file touched."""
    planted = plant(scratch)
    keep = snapshot(scratch)
    args = args if args is not None else _long_run(Path("results"))
    proc = kvbench(root, args, scratch / "cwd", start_new_session=group)
    if wait == "handler":  # the moment kvbench's code runs (it installs a SIGTERM handler first)
        deadline = time.time() + 30
        while not _catches_sigterm(proc.pid) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.002)
    elif wait:
        _wait_for(scratch / "cwd", wait)
    time.sleep(delay)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    return _signal_outcome(name, proc, 130 if sig == signal.SIGINT else 143, planted, scratch, keep)


JOBLIB = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1,2"]


def kill9_joblib_parent(root: Path, scratch: Path) -> dict:
    """kill -9 of a joblib parent: its workers must stop within 30 s and remove their job dirs."""
    planted = plant(scratch)
    cwd = scratch / "cwd"
    proc = kvbench(root, [*JOBLIB, *LONG], cwd, start_new_session=True)
    _wait_for(cwd, "results/runs/*/*/*/.running")
    time.sleep(0.5)
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid
               and b"resource_tracker" not in _cmdline(int(p))]
    proc.kill()
    proc.wait()  # not communicate(): workers that run on hold its pipes open
    deadline = time.time() + 30
    while any(_ppid(w) is not None for w in workers) and time.time() < deadline:
        time.sleep(0.2)
    running = [w for w in workers if _ppid(w) is not None]
    for pid in running:
        os.kill(pid, signal.SIGKILL)
    proc.communicate()
    half = [d for d in (cwd / "results").glob("runs/*/*/*") if d.is_dir() and not (d / "summary.json").exists()]
    outcome = ("user files removed" if removed(planted) else "hang" if running
               else "written on error" if half else "ok")
    return {"case": "kill-9-joblib-parent", "outcome": outcome,
            "detail": f"{len(workers)} workers, {len(running)} still running after 30 s, {len(half)} half job dirs"}


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it (found through /proc before any dies)."""
    tree, grew = {pid}, True
    while grew:
        below = {int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) in tree}
        grew = not below <= tree
        tree |= below
    for member in tree:
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ppid(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _results_tool(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvbench.results", *args], cwd=cwd, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(root)), timeout=120)


def _finished_runs(root: Path, results: Path, cwd: Path, *extra: list[str]) -> list[int]:
    procs = [kvbench(root, with_base(["workload.num_requests=4", *e], results), cwd) for e in extra]
    return [p.wait(timeout=300) for p in procs]


def clean_race(root: Path, scratch: Path) -> dict:
    """``kvbench-results --clean`` in a loop while runs start, and a user folder with a stray .running."""
    results = scratch / "results"
    user = results / "runs" / "adhoc" / "mine"
    (user / ".hydra").mkdir(parents=True)
    (user / ".running").write_text("")
    (user / "notes.txt").write_text("mine")
    procs = [kvbench(root, with_base([f"seed={s}", "workload.num_requests=20"], results), scratch) for s in range(3)]
    while any(p.poll() is None for p in procs):
        _results_tool(root, "--clean", "--index", str(results / "index.jsonl"), cwd=scratch)
    codes = [p.returncode for p in procs]
    rows, _ = _index_rows(results)
    ok = codes == [0, 0, 0] and len(rows) == 3 and (user / "notes.txt").is_file()
    outcome = "ok" if ok else "user files removed" if not (user / "notes.txt").is_file() else "data lost"
    return {"case": "clean-races-starting-runs", "outcome": outcome,
            "detail": f"exits {codes}, {len(rows)} rows, user folder {'kept' if user.is_dir() else 'removed'}"}


def reindex_keeps(root: Path, scratch: Path) -> dict:
    """--reindex with a run stored outside results_dir and then with runs/ missing: no row lost."""
    results = scratch / "results"
    codes = _finished_runs(root, results, scratch, [], [f"hydra.run.dir={scratch / 'outside' / 'run'}"])
    index = str(results / "index.jsonl")
    first = _results_tool(root, "--reindex", "--index", index, cwd=scratch)
    rows_first = len(_index_rows(results)[0])
    shutil.rmtree(results / "runs")
    second = _results_tool(root, "--reindex", "--index", index, cwd=scratch)
    rows, _ = _index_rows(results)
    ok = codes == [0, 0] and first.returncode == second.returncode == 0 and rows_first == 2 and len(rows) == 1
    return {"case": "reindex-keeps-finished-runs", "outcome": "ok" if ok else "data lost",
            "detail": f"rows {rows_first} then {len(rows)} (want 2 then 1: the outside run)"}


def unindexed_visible(root: Path, scratch: Path) -> dict:
    """A finished run whose row is missing (killed between summary.json and the row) is listed."""
    results = scratch / "results"
    codes = _finished_runs(root, results, scratch, [])
    (results / "index.jsonl").write_text("")
    out = _results_tool(root, "--index", str(results / "index.jsonl"), "--columns", "run_id", "--format", "csv",
                        cwd=scratch)
    ok = codes == [0] and out.returncode == 0 and len(out.stdout.splitlines()) == 2
    return {"case": "finished-run-without-row-listed", "outcome": "ok" if ok else "data lost",
            "detail": f"exit {out.returncode}, {len(out.stdout.splitlines()) - 1} runs listed"}


TOOL_CASES = {  # kvbench-results edges: (arguments, expected exit); {tmp}: the case's scratch folder
    "results-index-is-folder": (["--index", "{tmp}/results"], 2),
    "results-reindex-index-is-folder": (["--reindex", "--index", "{tmp}/results"], 2),
    "results-reindex-missing-folders": (["--reindex", "--index", "{tmp}/nope/sub/index.jsonl"], 2),
    "results-clean-missing-folders": (["--clean", "--index", "{tmp}/nope/sub/index.jsonl"], 2),
    "results-columns-empty": (["--index", "{tmp}/results/index.jsonl", "--columns", ""], 2),
    "results-where-bool-bad": (["--index", "{tmp}/results/index.jsonl", "--where", "chunked_prefill=maybe"], 2),
    "results-where-bool-order": (["--index", "{tmp}/results/index.jsonl", "--where", "chunked_prefill<true"], 2),
    "results-where-bool": (["--index", "{tmp}/results/index.jsonl", "--where", "chunked_prefill=true"], 0),
    "results-sort-mixed": (["--index", "{tmp}/results/index.jsonl", "--sort", "seed"], 0),
    "results-reindex-list-summary": (["--reindex", "--index", "{tmp}/results/index.jsonl"], 0),
}


def results_tool_edges(root: Path, scratch: Path) -> list[dict]:
    """Each kvbench-results edge as a real process on a results dir with mixed-type columns and a
    summary.json holding ``[]``: one line and exit 2 when refused, the right rows when valid."""
    results = scratch / "results"
    codes = _finished_runs(root, results, scratch, ["engine.chunked_prefill=false"], [])
    if codes != [0, 0]:
        return [{"case": "results-tool-setup", "outcome": "skipped", "detail": f"exits {codes}"}]
    with open(results / "index.jsonl", "a") as index:  # an older row: text where the others hold numbers
        index.write(json.dumps({"run_id": "20250101-000000-00000001", "experiment": "adhoc", "allocator": "paged",
                                "seed": "abc", "run_dir": "runs/adhoc/gone"}) + "\n")
    bad = results / "runs" / "adhoc" / "20250101-000000-0000cafe"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text("[]")
    out = []
    for name, (args, expect) in TOOL_CASES.items():
        before = snapshot(scratch)
        proc = _results_tool(root, *[a.replace("{tmp}", str(scratch)) for a in args], cwd=scratch)
        new = {p for p in snapshot(scratch) - before if "__pycache__" not in p and not p.endswith((".lock", ".tmp"))}
        rows = len(_index_rows(results)[0])
        if "Traceback" in proc.stderr:
            outcome = "traceback"
        elif proc.returncode != expect:
            outcome = "silent result" if proc.returncode == 0 else "unclear error"
        elif expect == 2:
            lines = proc.stderr.strip().splitlines()
            outcome = "written on error" if new else "clear error" if len(lines) == 1 else "unclear error"
        elif name == "results-reindex-list-summary":
            outcome = "ok" if rows == 2 and len(proc.stdout.strip().splitlines()) == 1 else "data lost"
        else:
            outcome = "ok" if proc.stdout.strip() else "silent result"
        out.append({"case": name, "outcome": outcome, "exit": proc.returncode,
                    "stderr_last": (proc.stderr.strip().splitlines() or [""])[-1][:200]})
    return out


LONG = ["workload.num_requests=3000", "engine.kv_cache_bytes=2e9", "progress=false", "logger=none",
        "results_dir=results"]
NEW_FAULTS = {
    "sigterm-start-up": lambda r, s: signal_at(r, s, signal.SIGTERM, 0.3, "sigterm-start-up"),
    "sigint-start-up": lambda r, s: signal_at(r, s, signal.SIGINT, 0.3, "sigint-start-up"),
    "sigterm-imports": lambda r, s: signal_at(r, s, signal.SIGTERM, 0.0, "sigterm-imports", wait="handler"),
    "sigint-imports": lambda r, s: signal_at(r, s, signal.SIGINT, 0.05, "sigint-imports", wait="handler"),
    "sigterm-at-1.5s": lambda r, s: signal_at(r, s, signal.SIGTERM, 1.5, "sigterm-at-1.5s"),
    "sigint-at-3s": lambda r, s: signal_at(r, s, signal.SIGINT, 3.0, "sigint-at-3s"),
    "sigterm-first-step": lambda r, s: signal_at(r, s, signal.SIGTERM, 0.0, "sigterm-first-step",
                                                 wait="results/runs/*/*/.running"),
    "sigterm-run-dir-in-cwd": lambda r, s: signal_at(r, s, signal.SIGTERM, 1.0, "sigterm-run-dir-in-cwd",
                                                     ["hydra.run.dir=mine", *LONG], wait="mine/.running"),
    "sigint-basic-multirun": lambda r, s: signal_at(r, s, signal.SIGINT, 1.0, "sigint-basic-multirun",
                                                    ["-m", "seed=0,1", *LONG], wait="results/runs/*/*/*/.running"),
    "sigterm-joblib-parent": lambda r, s: signal_at(r, s, signal.SIGTERM, 1.0, "sigterm-joblib-parent",
                                                    [*JOBLIB, *LONG], wait="results/runs/*/*/*/.running"),
    "ctrl-c-joblib-group": lambda r, s: signal_at(r, s, signal.SIGINT, 1.0, "ctrl-c-joblib-group",
                                                  [*JOBLIB, *LONG], wait="results/runs/*/*/*/.running", group=True),
    "sigterm-joblib-start": lambda r, s: signal_at(r, s, signal.SIGTERM, 0.5, "sigterm-joblib-start",
                                                   [*JOBLIB, *LONG], wait="results/runs/*/*/multirun.yaml"),
    "kill-9-joblib-parent": kill9_joblib_parent,
    "clean-races-starting-runs": clean_race,
    "reindex-keeps-finished-runs": reindex_keeps,
    "finished-run-without-row-listed": unindexed_visible,
}

FAULTS = [concurrent_runs, concurrent_sweeps, strict_index, gpu_count_recorded,
          lambda r, s: interrupt(r, s, signal.SIGINT, 130, "sigint-mid-run"),
          lambda r, s: interrupt(r, s, signal.SIGTERM, 143, "sigterm-mid-run"),
          kill9]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE, help="checkout whose code runs (default: this one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every case's outcome here")
    parser.add_argument("--only", help="substring of the case ids to run")
    parser.add_argument("--no-faults", action="store_true", help="skip the concurrency / interrupt / kill cases")
    parser.add_argument("--new", action="store_true",
                        help="only the classes of issue 18: the output-dir cases, signals, the results tool")
    args = parser.parse_args()
    root = args.root.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="kvbench-census-"))
    cases = [c for c in rc.CASES if (not args.only or args.only in c[0])
             and (not args.new or c[0].startswith(("run-dir-", "sweep-")))]
    t0 = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run_table_case(root, c, scratch), cases))
    if not args.no_faults:
        for fault in ([] if args.new else FAULTS):
            folder = Path(tempfile.mkdtemp(prefix="fault-", dir=scratch))
            results.append(fault(root, folder))
        for name, fault in NEW_FAULTS.items():
            if args.only and args.only not in name:
                continue
            folder = Path(tempfile.mkdtemp(prefix="fault-", dir=scratch))
            results.append(fault(root, folder))
        if not args.only or any(args.only in name for name in TOOL_CASES):
            results += results_tool_edges(root, Path(tempfile.mkdtemp(prefix="tool-", dir=scratch)))
    shutil.rmtree(scratch, ignore_errors=True)
    counts = collections.Counter(r["outcome"] for r in results)
    width = max(len(r["case"]) for r in results)
    for r in results:
        if r["outcome"] not in ("clear error", "ok"):
            print(f"{r['case']:<{width}}  {r['outcome']:<16}  {r.get('exit')}  {r.get('stderr_last', r.get('detail', ''))}")
    print(f"\n{len(results)} cases ({len(cases)} bad inputs, {len(results) - len(cases)} faults) "
          f"in {time.time() - t0:.0f} s against {root.name}")
    print("| outcome | cases |\n| --- | --- |")
    for outcome in ("clear error", "ok", "traceback", "unclear error", "written on error", "silent result",
                    "data lost", "user files removed", "hang", "skipped"):
        print(f"| {outcome} | {counts.get(outcome, 0)} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
