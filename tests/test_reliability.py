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
from kvbench import results as results_mod
from kvbench.app import _errors, check_job, precheck
from kvbench.config import CONF_DIR, ConfigError
from kvbench.rundir import check_output_dirs
from kvbench.results import load_index, reindex

ROOT = Path(__file__).resolve().parent.parent
BASE = ["progress=false", "logger=none", "workload.num_requests=4"]
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
        assert row["request_rate"] is None and row["nonfinite"] == "request_rate=inf"
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
    assert results_mod.clean(index) == [dead] and not dead.exists()


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
    proc = kvbench(*with_base(["workload.num_requests=3000", "engine.kv_cache_bytes=2e9"], results), cwd=tmp_path)
    deadline = time.time() + 120
    while not list(results.glob("runs/*/*/.running")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and "nothing was kept" in lines[0], err
    assert not list((results / "runs").rglob("*")) if (results / "runs").exists() else True
