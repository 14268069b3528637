"""Reliability tier (fast): every bad input of the table is refused by the pre-check with one line
and nothing written; run dirs never collide across processes; the index is strict JSON, rebuilt
from run dirs, and whole after a failed append; errors and interrupts keep nothing half-written.

The table's subprocess versions (every case as a real ``kvbench`` process) and kill -9 at random
points are in ``test_reliability_slow.py``.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

import reliability_cases as rc
from census_runtime import LONG_WORKLOAD
import kvbench.results.reindex as reindex_mod
from kvbench.results import store as results_mod
from kvbench.run.prepare import _errors
from kvbench.run.precheck import check_job, precheck
from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.run.rundir import check_output_dirs
from kvbench.results.store import load_index
from kvbench.results.reindex import reindex

ROOT = Path(__file__).resolve().parent.parent
BASE = ["progress=false", "logger=none", "workload.num_requests=4"]
LONG = [*LONG_WORKLOAD, "engine.kv_cache_bytes=2e9"]  # outlasts any wait before a signal (census_runtime)
GROUPS = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
_COMPOSED: dict[tuple[str, ...], object] = {}


def with_base(args: list[str], results: Path) -> list[str]:
    keys = {a.lstrip("+").split("=", 1)[0] for a in args}
    base = [b for b in [*BASE, f"results_dir={results}"] if b.split("=", 1)[0] not in keys]
    flags = [a for a in args if a.startswith("-")]  # Hydra wants -m before the overrides
    return [*flags, *base, *[a for a in args if not a.startswith("-")]]


def fast_precheck(args: list[str]) -> str | None:
    """The pre-check of one job, with the config composed once per group choice (Hydra's compose
    is the slow part) and value overrides applied as Hydra parses them; the error line or None."""
    groups = tuple(a for a in args if a.split("=", 1)[0] in GROUPS)
    values = [a for a in args if a not in groups]
    if any(a.split("=", 1)[0] in OUTPUT_KEYS for a in args):
        return output_dirs_precheck(args)
    if any(a.startswith("-") for a in args):
        return precheck(args)
    try:
        if groups not in _COMPOSED:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                _COMPOSED[groups] = compose(config_name="config", overrides=list(groups))
        cfg = _COMPOSED[groups].copy()
        for override in OverridesParser.create().parse_overrides(values):
            key, value = override.key_or_group, override.value()
            if override.is_add():
                with open_dict(cfg):
                    OmegaConf.update(cfg, key, value, force_add=True)
            else:
                if OmegaConf.select(cfg, key, default="<missing>") == "<missing>":
                    return f"Could not override '{key}': no such key"
                OmegaConf.update(cfg, key, value)
        check_job(cfg)
    except _errors() as exc:
        return str(exc)
    except Exception as exc:  # Hydra / OmegaConf refusing the override itself
        if "omegaconf" in type(exc).__module__ or "hydra" in type(exc).__module__:
            return str(exc).splitlines()[0]
        raise
    return None


OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def output_dirs_precheck(args: list[str]) -> str | None:
    """The pre-check's run/sweep dir check on a Hydra config composed once (the cases differ only
    in hydra.run.dir, hydra.sweep.dir and hydra.sweep.subdir); the error line or None."""
    multirun = "-m" in args
    if "hydra" not in _COMPOSED:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            _COMPOSED["hydra"] = compose(config_name="config", return_hydra_config=True)
    cfg = _COMPOSED["hydra"].copy()
    for arg in args:
        key, _, value = arg.partition("=")
        if key in OUTPUT_KEYS:
            OmegaConf.update(cfg, key, value)
    try:
        check_output_dirs(cfg, multirun)
    except ConfigError as exc:
        return str(exc)
    return None


def files_under(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.mark.parametrize("case", rc.PRECHECK, ids=[c[0] for c in rc.PRECHECK])
def test_precheck_refuses_bad_input_with_one_line_and_writes_nothing(case, tmp_path):
    case_id, args, setup = case
    if setup:
        rc.SETUPS[setup](tmp_path)
    (tmp_path / "cwd").mkdir()
    before = files_under(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path / "cwd")
        error = fast_precheck(with_base(rc.expand(args, tmp_path), tmp_path / "results"))
    assert error, f"{case_id}: accepted"
    assert "\n" not in error.strip() and len(error) < 400, error
    assert files_under(tmp_path) == before


def test_the_table_holds_at_least_120_cases():
    assert len(rc.CASES) >= 120 and len(rc.PRECHECK) >= 120
    assert len({c[0] for c in rc.CASES}) == len(rc.CASES)


def kvbench(*args: str, cwd: Path, env: dict | None = None, **kw) -> subprocess.Popen:
    env = dict(env or os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true")
    env.pop("TRITON_INTERPRET", None)  # the kernel tests set it in this process; a user's shell has not
    return subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.mark.parametrize("case_id", ["seed=abc", "engine.kv_cache_bytes=1e30", "results-dir-empty",
                                     "experiment-escapes", "sharegpt-torn-one-record", "hf-triton-on-cpu",
                                     "hf-garbage-gguf", "multirun-bad-seed"])
def test_cli_bad_input_exits_2_with_one_line(case_id, tmp_path):
    _, args, setup = next(c for c in rc.CASES if c[0] == case_id)
    if setup:
        rc.SETUPS[setup](tmp_path)
    (tmp_path / "cwd").mkdir()
    before = files_under(tmp_path)
    out, err = kvbench(*with_base(rc.expand(args, tmp_path), tmp_path / "results"), cwd=tmp_path / "cwd").communicate(timeout=300)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvbench: error:"), err
    assert files_under(tmp_path) == before


def _rows(index: Path) -> list[dict]:
    def refuse(token):
        raise ValueError(f"non-strict JSON token {token}")
    return [json.loads(line, parse_constant=refuse) for line in index.read_text().splitlines()]


def test_concurrent_processes_and_sweeps_never_share_a_run_dir(tmp_path):
    results = tmp_path / "results"
    allocators = ["paged", "buddy", "orca-max", "paged_prefix"]
    procs = [kvbench(*with_base([f"allocator={a}", "workload.num_requests=10"], results), cwd=tmp_path)
             for a in allocators]
    procs += [kvbench(*with_base(["-m", "allocator=paged,buddy", f"seed={s}"], results), cwd=tmp_path) for s in (1, 2)]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
    rows = _rows(results / "index.jsonl")  # strict JSON: request_rate=inf is null + nonfinite
    assert len(rows) == 8 and len({r["run_dir"] for r in rows}) == 8 and len({r["run_id"] for r in rows}) == 8
    for row in rows:
        run_dir = results / row["run_dir"]
        assert run_dir.name == row["run_id"]  # the run_id is the directory's name
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["run_id"] == row["run_id"] and summary["allocator"] == row["allocator"]
        assert row["request_rate"] is None and "request_rate=inf" in row["nonfinite"].split(",")
        assert not (run_dir / ".running").exists()
    assert (load_index(results / "index.jsonl")["request_rate"] == float("inf")).all()


def test_reindex_rebuilds_the_index_and_clean_removes_dead_runs(tmp_path):
    results = tmp_path / "results"
    for allocator in ("paged", "buddy"):
        assert kvbench(*with_base([f"allocator={allocator}"], results), cwd=tmp_path).wait(timeout=300) == 0
    index = results / "index.jsonl"
    want = sorted(r["run_id"] for r in _rows(index))
    index.write_text('{"run_id": "torn')  # a damaged index
    dead = results / "runs" / "adhoc" / "20250101-000000-deadbeef"
    (dead / ".hydra").mkdir(parents=True)
    (dead / ".steps.parquet.1.tmp").write_bytes(b"half")
    (dead / ".running").write_text(json.dumps({"kvbench_run": dead.name, "pid": 1, "made_dir": True}))
    assert reindex(index)[:2] == (2, 1)
    assert sorted(r["run_id"] for r in _rows(index)) == want
    assert reindex_mod.clean(index) == [dead] and not dead.exists()


def test_failed_append_leaves_the_index_whole(tmp_path, monkeypatch):
    index = tmp_path / "index.jsonl"
    results_mod.append_index_row(index, {"run_id": "a"})
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        results_mod.append_index_row(index, {"run_id": "b", "x": 1})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert [r["run_id"] for r in _rows(index)] == ["a"]


def test_full_disk_mid_run_keeps_nothing_and_says_so(tmp_path):
    """A 200 KiB tmpfs (the pre-check's free-space floor lowered): the memory snapshots fill it."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        proc = kvbench(*with_base(["engine.memmap_every=1", "workload.num_requests=200", "model=opt-125m"],
                                  mount / "results"), cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                                            KVBENCH_MIN_FREE_BYTES="0"))
        _, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "No space left" in lines[0], err
        assert files_under(mount) == set()  # the run dir and the folders made for it are gone
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_prints_one_line_and_leaves_no_half_run(tmp_path, sig, code):
    results = tmp_path / "results"
    proc = kvbench(*with_base(LONG, results), cwd=tmp_path)
    deadline = time.time() + 120
    while not list(results.glob("runs/*/*/.running")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and "nothing was kept" in lines[0], err
    assert not list((results / "runs").rglob("*")) if (results / "runs").exists() else True


# -- nothing kvbench did not make is ever removed or changed ----------------------------------------


def plant(tmp: Path) -> dict[Path, bytes]:
    """User files in the cwd, the results root, the parent of the run dirs, and two finished runs of
    an older sweep; returns their bytes."""
    files = {tmp / "cwd" / "mine.txt": b"the user's notes\n",
             tmp / "cwd" / ".hydra" / "overrides.yaml": b"- mine\n",
             tmp / "results" / "root.txt": b"results root\n",
             tmp / "cwd" / "parent" / "sibling.txt": b"next to the run dirs\n"}
    for n in (1, 2):
        run = tmp / "cwd" / "old-sweep" / f"20250101-00000{n}-0000beef"
        files[run / "summary.json"] = json.dumps({"run_id": run.name}).encode() + b"\n"
        files[run / ".hydra" / "overrides.yaml"] = b"- seed=1\n"
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def assert_untouched(files: dict[Path, bytes]) -> None:
    changed = [str(p) for p, data in files.items() if not p.is_file() or p.read_bytes() != data]
    assert not changed, f"user files removed or changed: {changed}"


def _wait_for(pattern: str, folder: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not list(folder.glob(pattern)) and time.time() < deadline:
        time.sleep(0.1)


HF_EOS = ["backend=hf", "model=tiny-llama", "workload.ignore_eos=false"]
JOBLIB = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
GUARD_CASES = {  # name: (arguments, signal or None, the file to wait for under cwd, expected exit)
    "hf-eos-in-cwd": (["hydra.run.dir=.", *HF_EOS], None, None, 2),
    "sweep-subdir-up": (["-m", "hydra.sweep.dir=old-sweep", "hydra.sweep.subdir=..", "seed=0,1"], None, None, 2),
    "sigterm-mid-run": (["hydra.run.dir=parent/sig", *LONG], signal.SIGTERM, "parent/sig/.running", 143),
    "hf-eos-in-new-dir": (["hydra.run.dir=parent/new", *HF_EOS], None, None, 2),
    "sweep-into-finished": (["-m", "hydra.sweep.dir=old-sweep/20250101-000001-0000beef", "seed=0,1"], None, None, 2),
    "sigint-mid-run": (["hydra.run.dir=parent/int", *LONG], signal.SIGINT, "parent/int/.running", 130),
    "sigint-basic-multirun": (["-m", "hydra.sweep.dir=parent/basic", "seed=0,1", *LONG], signal.SIGINT,
                              "parent/basic/*/.running", 130),
    "sigterm-joblib-parent": ([*JOBLIB, "hydra.sweep.dir=parent/joblib", "seed=0,1,2", *LONG], signal.SIGTERM,
                              "parent/joblib/*/.running", 143),
}
FAST_GUARD = ("hf-eos-in-cwd", "sweep-subdir-up", "sigterm-mid-run")


def guard(tmp_path: Path, names) -> None:
    """Run the guard cases side by side as real processes; every planted file must survive, byte
    for byte, each case end in one line with its exit code, and no file be left behind."""
    files = plant(tmp_path)
    cwd, results = tmp_path / "cwd", tmp_path / "results"
    procs = {name: kvbench(*with_base(GUARD_CASES[name][0], results), cwd=cwd) for name in names}
    for name in names:
        _, sig, wait, _ = GUARD_CASES[name]
        if sig is not None:
            _wait_for(wait, cwd)
            time.sleep(1.0)
            procs[name].send_signal(sig)
    for name in names:
        _, err = procs[name].communicate(timeout=300)
        lines = err.strip().splitlines()
        code = GUARD_CASES[name][3]
        assert procs[name].returncode == code and len(lines) == 1 and lines[0].startswith("kvbench: "), (name, err)
    assert_untouched(files)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and p not in files)
    assert left == [], left  # and every unfinished run dir is gone


def test_no_failure_or_signal_touches_a_planted_file(tmp_path):
    guard(tmp_path, FAST_GUARD)


@pytest.mark.slow
def test_no_failure_or_signal_anywhere_touches_a_planted_file(tmp_path):
    guard(tmp_path, list(GUARD_CASES))


@pytest.mark.slow
def test_kill_9_of_a_joblib_parent_stops_its_workers(tmp_path):
    files = plant(tmp_path)
    cwd = tmp_path / "cwd"
    proc = kvbench(*with_base([*JOBLIB, "hydra.sweep.dir=parent/sweep", "seed=0,1", *LONG], tmp_path / "results"),
                   cwd=cwd, start_new_session=True)
    _wait_for("parent/sweep/*/.running", cwd)
    time.sleep(0.2)  # the second worker may still be starting: it must stop as well
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid
               and b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while any(_ppid(w) is not None for w in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert workers and all(_ppid(w) is None for w in workers), "workers still running after their parent died"
    assert_untouched(files)
    assert not list((cwd / "parent" / "sweep").glob("*/.hydra"))  # each worker removed its unfinished job dir


def _ppid(pid: int) -> int | None:
    """The parent of a live process, or None once it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler (kvbench installs one before its imports)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def test_a_signal_during_start_up_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "cwd").mkdir()
    proc = kvbench(*with_base([], tmp_path / "results"), cwd=tmp_path / "cwd")
    while not catches_sigterm(proc.pid) and proc.poll() is None:
        time.sleep(0.002)  # the interpreter's own start-up, before any kvbench code, is not ours
    proc.send_signal(signal.SIGTERM)  # kvbench is importing its modules
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 143 and len(lines) == 1 and lines[0].startswith("kvbench: "), err
    assert files_under(tmp_path) == {str(tmp_path / "cwd")}


def test_a_signal_during_the_write_lets_the_run_finish_and_says_so(tmp_path, monkeypatch):
    """SIGTERM arrives while summary.json is written: the run completes, then Terminated is raised."""
    from kvbench.run import job as app  # the Hydra job module: run and discard as the job sees them
    from kvbench.run import signals

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*BASE, f"results_dir={tmp_path}"])
    real = results_mod.atomic_write

    def write_then_signal(path, write):
        if path.name == "summary.json":
            os.kill(os.getpid(), signal.SIGTERM)  # held back until the run's files and row are in place
        real(path, write)

    monkeypatch.setattr(results_mod, "atomic_write", write_then_signal)
    old = signal.getsignal(signal.SIGTERM)
    signals.install_run_handlers()
    try:
        with pytest.raises(signals.Terminated):
            app.run(cfg, run_dir=tmp_path / "runs" / "adhoc" / "x", run_id="x")
    finally:
        signal.signal(signal.SIGTERM, old)
    assert (tmp_path / "runs" / "adhoc" / "x" / "summary.json").is_file()
    assert [r["run_id"] for r in _rows(tmp_path / "index.jsonl")] == ["x"]
    assert app.discard(tmp_path / "runs" / "adhoc" / "x").startswith("the finished run stays")


# -- the index under a real full disk ---------------------------------------------------------------


def _tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


def _fill(folder: Path) -> Path:
    """Fill the file system with one file until a write fails; that file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass
    return filler


ROW = {"run_id": "20260101-000000-0000beef", "allocator": "paged", "pad": "x" * 900}  # ~1 KiB, like a summary


def append_on_a_full_disk(mount: Path, cuts: list[int]) -> list[str]:
    """For each cut: an index whose free tail ends ``cut`` bytes into the new row, the disk filled;
    append and check the index is the old bytes plus the whole row, or the old bytes alone."""
    index = mount / "index.jsonl"
    line = len(json.dumps(ROW)) + 1
    failures = []
    for cut in cuts:
        for path in mount.iterdir():
            path.unlink()
        old_len = 4096 - cut  # tmpfs hands out 4 KiB pages: the row is cut `cut` bytes in
        bare = len(json.dumps({"run_id": "old", "pad": ""})) + 1
        old = (json.dumps({"run_id": "old", "pad": "y" * (old_len - bare)}) + "\n").encode()
        assert len(old) == old_len
        index.write_bytes(old)
        filler = _fill(mount)
        try:
            results_mod.append_index_row(index, ROW)
            ok = True
        except OSError as exc:
            ok = False
            if exc.errno != errno.ENOSPC:
                failures.append(f"cut {cut}: {exc}")
        data = index.read_bytes()
        whole = old + (json.dumps(ROW) + "\n").encode()
        if data != (whole if ok else old):
            failures.append(f"cut {cut}: {'appended' if ok else 'refused'}, index {len(data)} bytes "
                            f"(old {len(old)}, row {line})")
        filler.unlink()
    return failures


@pytest.fixture
def tiny_fs(tmp_path):
    mount = tmp_path / "tiny"
    if not _tmpfs(mount, "64k"):
        pytest.skip("cannot mount a tmpfs here (not root)")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_index_append_on_a_real_full_disk_is_whole_or_absent(tiny_fs):
    line = len(json.dumps(ROW)) + 1
    assert append_on_a_full_disk(tiny_fs, [0, 1, 2, line // 2, line - 1, line, line + 1]) == []


@pytest.mark.slow
def test_index_append_on_a_real_full_disk_at_every_byte_of_the_row(tiny_fs):
    assert append_on_a_full_disk(tiny_fs, list(range(len(json.dumps(ROW)) + 3))) == []


# -- --clean never races a starting run ----------------------------------------------------------


def test_clean_in_a_loop_never_breaks_starting_runs(tmp_path):
    results = tmp_path / "results"
    index = results / "index.jsonl"
    user = results / "runs" / "adhoc" / "mine"
    (user / ".hydra").mkdir(parents=True)
    (user / ".running").write_text("")  # a stray .running in a user's folder
    (user / "notes.txt").write_text("mine")
    procs = [kvbench(*with_base([f"seed={s}", "workload.num_requests=20"], results), cwd=tmp_path) for s in range(3)]
    cleaned = 0
    while any(p.poll() is None for p in procs):
        cleaned += len(reindex_mod.clean(index))
        time.sleep(0.005)
    errs = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    assert cleaned == 0 and len(_rows(index)) == 3 and (user / "notes.txt").read_text() == "mine"


def test_a_sweep_with_no_finished_run_leaves_nothing_of_kvbench_and_keeps_the_rest(tmp_path, monkeypatch):
    from kvbench.run.rundir import KEEP_ENV, discard_sweep

    monkeypatch.setenv(KEEP_ENV, str(tmp_path))  # the folder that was there before the sweep
    sweep = tmp_path / "sweep"
    (sweep / ".jobs").mkdir(parents=True)
    (sweep / ".jobs" / "multirun.start").write_text("{}")
    (sweep / ".jobs" / "0.json").write_text("{}")
    (sweep / "multirun.yaml").write_text("")
    assert discard_sweep(sweep) == "no run had finished; nothing was kept" and not sweep.exists()

    (sweep / ".jobs").mkdir(parents=True)
    (sweep / ".jobs" / "multirun.start").write_text("{}")
    (sweep / ".jobs" / "notes.txt").write_text("the user's")  # not kvbench's: it stays, and so does its folder
    assert discard_sweep(sweep).startswith("no run had finished; files kvbench did not write stay")
    assert sorted(p.name for p in (sweep / ".jobs").iterdir()) == ["notes.txt"]
