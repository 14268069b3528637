"""Reliability of inputs (slow tier): the class cases as real ``kvbench`` processes, console
scripts as processes, a sweep whose job fails after the pre-check on hf, and an Optuna study
whose trials fail. Each process must exit 2 (1 for a sweep with failed jobs) with one line per
failure, no traceback, nothing written outside its results dir and nothing removed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import input_cases as ic

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CASES = ic.knob_cases()[::4] + ic.EXTRA_CASES


@pytest.mark.parametrize("case_id,args", CASES, ids=[c for c, _ in CASES])
def test_case_as_a_process_exits_2_with_one_line(case_id, args, tmp_path):
    out = ic.run_process(args, tmp_path)
    assert ic.classify_process(out) == "clean", out


def _script(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("module,args,code", [
    ("kvbench.sim.validate", ["--file", "empty.csv"], 2),
    ("kvbench.sim.validate", ["--fit", "--file", "one.csv"], 2),
    ("kvbench.sim.validate", ["--bogus"], 2),
    ("kvbench.loggers.sync", ["--timeout", "nan"], 2),
    ("kvbench.loggers.sync", ["no-such-folder"], 2),
    ("kvbench.dashboard", ["--save"], 2),
    ("kvbench.dashboard", ["--save", "--entity", "nobody-kvbench-test"], 1),
])
def test_console_scripts_as_processes(module, args, code, tmp_path):
    from kvbench.sim.validate import MEASUREMENTS

    (tmp_path / "empty.csv").write_text("")
    lines = [ln for ln in MEASUREMENTS.read_text().splitlines() if not ln.startswith("#")]
    (tmp_path / "one.csv").write_text("\n".join(lines[:2]) + "\n")
    before = set(tmp_path.rglob("*"))
    proc = _script(module, args, tmp_path)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert set(tmp_path.rglob("*")) == before


def _kvbench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]], ids=["basic", "joblib"])
def test_hf_sweep_with_a_job_failing_after_the_precheck(launcher, tmp_path):
    """workload.ignore_eos=true,false on a model with no EOS: one line for the false job, the true
    job finishes and keeps its run, exit 1; the sweep dir records the failure."""
    from kvbench.run.jobresult import read_failures
    from kvbench.results.store import load_index

    proc = _kvbench(["-m", *launcher, "backend=hf", "model=tiny-llama", "workload.num_requests=4", "workload.ignore_eos=true,false",
                     f"results_dir={tmp_path / 'results'}", "progress=false"], tmp_path)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kvbench")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(errors) == 2 and "names no EOS token" in errors[0], errors
    index = load_index(tmp_path / "results" / "index.jsonl")
    assert len(index) == 1
    records = list((tmp_path / "results").rglob("failed_jobs.jsonl"))
    assert len(records) == 1 and [f["job"] for f in read_failures(records[0].parent)] == [1]


def test_optuna_study_goes_on_after_failed_trials(tmp_path):
    proc = _kvbench(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=1",
                     "backend=hf", "model=tiny-llama", "workload.num_requests=4", "workload.ignore_eos=choice(true,false)",
                     f"results_dir={tmp_path / 'results'}", "progress=false"], tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Best value" in proc.stdout + proc.stderr
    assert proc.returncode == (1 if "job(s) of this sweep failed" in proc.stderr else 0)


def test_a_run_that_rejects_every_request_exits_2_and_says_so(tmp_path):
    proc = _kvbench(["engine.kv_cache_bytes=1.2e8", "workload.num_requests=4",
                     f"results_dir={tmp_path / 'results'}", "progress=false"], tmp_path)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("kvbench: error: all 4 requests were rejected"), \
        proc.stderr


def test_a_torn_sharegpt_file_is_refused_and_a_whole_one_runs(tmp_path):
    import json

    import reliability_cases as rc
    from kvbench.run.precheck import precheck

    text = json.dumps(rc._pairs(60))
    (tmp_path / "torn.json").write_text(text[: len(text) // 2])
    (tmp_path / "whole.json").write_text(text)
    base = ["workload=sharegpt", "model=smollm2-135m", "workload.source=dataset", f"results_dir={tmp_path / 'r'}"]
    error = precheck([*base, f"workload.path={tmp_path / 'torn.json'}"])
    assert error and "is cut off" in error and "30 complete records" in error
    assert precheck([*base, f"workload.path={tmp_path / 'whole.json'}"]) is None


def test_hf_family_is_checked_up_front(tmp_path):
    from kvbench.run.precheck import precheck

    error = precheck(["-m", "backend=hf", "model=tiny-llama", "model.family=llama,nope", f"results_dir={tmp_path}"])
    assert error and error.startswith("model.family must be one of")


def test_a_full_disk_mid_sweep_is_one_line_per_failure(tmp_path):
    """A real ENOSPC (a 200 KiB tmpfs): the job that hits it is one line, Hydra failing to write
    the next job's config is one more, the finished runs keep their files and rows."""
    from kvbench.results.store import load_index

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("needs a tmpfs mount (root)")
    try:
        env_args = ["-m", "seed=0,1,2,3,4,5,6,7", "workload.num_requests=40", f"results_dir={disk / 'results'}",
                    "progress=false", "hydra/job_logging=disabled"]
        proc = subprocess.run([sys.executable, "-m", "kvbench.app", *env_args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                           "KVBENCH_MIN_FREE_BYTES": "0", "OMP_NUM_THREADS": "1"})
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert lines and all(ln.startswith("kvbench") for ln in lines), proc.stderr
        assert any("No space left" in ln for ln in lines)
        finished = list((disk / "results").rglob("summary.json"))
        assert finished and len(load_index(disk / "results" / "index.jsonl")) == len(finished)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
