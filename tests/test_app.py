"""The kvbench app: every config composes, bad input exits 2 with one line, sweeps and launchers."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kvbench.run.lifecycle import run
from kvbench.config.errors import CONF_DIR
from kvbench.results.store import SUMMARY_COLUMNS, load_index

ROOT = Path(__file__).resolve().parent.parent
GROUPS = ["allocator", "model", "workload", "engine", "backend", "gpu", "logger", "experiment"]
QUICK = ["workload.num_requests=30", "progress=false", "logger=none"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_config_composes(group, option):
    cfg = composed([f"{group}={option}"])
    assert cfg.allocator.name and cfg.model.name and cfg.workload.name


@pytest.mark.parametrize("experiment", options("experiment"))
def test_an_experiments_base_config_sets_a_rate_for_its_duration(experiment):
    """The pre-check runs an experiment's own config before its sweep sets each job's rate: a
    Poisson trace of ``duration_s`` needs a finite rate there too, or ``kvbench -m
    experiment=...`` fails (a replayed trace times its own requests)."""
    from kvbench.workloads import WORKLOADS

    workload = composed([f"experiment={experiment}"]).workload
    replays = WORKLOADS[str(workload.name).strip().lower().replace("-", "_")].replays_trace
    if workload.get("duration_s") is not None and not replays:
        assert math.isfinite(float(workload.request_rate)), f"{experiment}: duration_s with request_rate inf"


def kvbench(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true")
    return subprocess.run([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("override,needle", [
    ("allocator.foo=1", "allocator.foo"),
    ("allocator=nope", "allocator/nope"),
    ("allocator.block_size=0", "block_size"),
    ("allocator.block_size=3", "block_size"),
    ("allocator.reserve=sometimes", "reserve"),
    ("engine.preemption=never", "engine.preemption"),
    ("workload.n=0", "workload.n"),
    ("workload.request_rate=-1", "workload.request_rate"),
    ("workload=nope", "workload/nope"),
    ("workload=sharegpt workload.path=/no/such/file.json", "workload.path"),
    ("model=opt-175b", "does not fit"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, override, needle):
    proc = kvbench(*override.split(), f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("kvbench: error:")
    assert not (tmp_path / "r").exists() and not (tmp_path / "outputs").exists()


def test_run_writes_the_design_columns(tmp_path):
    cfg = composed(["allocator=buddy", "allocator.reserve=pow2", "backend=sim", f"results_dir={tmp_path}", *QUICK])
    summary = run(cfg)
    assert set(SUMMARY_COLUMNS) <= set(summary)
    assert summary["allocator"] == "buddy" and summary["reserve"] == "pow2" and summary["num_finished"] == 30
    assert summary["prefix_hit_rate"] is None  # does not apply: null, never a made-up 0
    fracs = [summary[c] for c in ("mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac")]
    assert math.isclose(sum(fracs), 1.0, abs_tol=1e-9)
    index = load_index(tmp_path / "index.jsonl")
    assert list(index.columns[: len(SUMMARY_COLUMNS)]) == list(SUMMARY_COLUMNS)
    run_dir = tmp_path / index.loc[0, "run_dir"]
    assert {p.name for p in run_dir.iterdir()} >= {"summary.json", "steps.parquet", "requests.parquet"}


def test_cli_run_and_multirun_over_allocators(tmp_path):
    proc = kvbench("allocator=buddy", "allocator.reserve=pow2", "backend=sim", f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = kvbench("-m", "allocator=paged,orca-max,paged_prefix", f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    index = load_index(tmp_path / "index.jsonl")
    assert sorted(index["allocator"]) == ["buddy", "buddy", "paged", "paged_prefix"]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_launchers_finish_every_job_and_a_failing_job_spares_the_others(tmp_path, launcher):
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else ["hydra.launcher.timeout_min=5"]
    proc = kvbench("-m", f"hydra/launcher={launcher}", *extra, "allocator=paged,orca-oracle",
                   "engine.max_steps=null,1", f"results_dir={tmp_path}", *QUICK, cwd=tmp_path, timeout=600)
    assert proc.returncode != 0  # the max_steps=1 jobs fail...
    rows = [json.loads(line) for line in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert sorted(r["allocator"] for r in rows) == ["buddy", "paged"]  # ...the others finish, once each
    assert len({r["run_id"] for r in rows}) == 2


def test_wandb_logger_records_steps_summary_and_figure_offline(tmp_path):
    proc = kvbench("logger=wandb", "allocator=paged", f"results_dir={tmp_path}", *QUICK[:-1], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from kvbench.loggers.wandb_offline import read_offline_run

    index = load_index(tmp_path / "index.jsonl")
    run_dir = tmp_path / index.loc[0, "run_dir"]
    wandb_run = read_offline_run(next((run_dir / "wandb").glob("offline-run-*")))
    assert wandb_run.exit_code == 0
    assert wandb_run.config["run_id"] == index.loc[0, "run_id"]  # one id ties W&B to the index row
    assert {"allocator=paged", "block_size=16", "workload=synthetic", "experiment=adhoc"} <= set(wandb_run.tags)
    assert wandb_run.name.startswith("paged-bs16-synthetic-r")
    files = [a["files"] for a in wandb_run.artifacts if a["type"] == "kvbench-run"]
    assert len(files) == 1 and {"summary.json", "steps.parquet", "requests.parquet"} <= set(files[0])
    steps = [h for h in wandb_run.history if "steps/mem_token_frac" in h]
    assert len(steps) == index.loc[0, "num_steps"] and steps[-1]["step"] == len(steps) - 1
    assert wandb_run.summary["num_finished"] == 30
    assert wandb_run.summary["mean_batch_size"] == pytest.approx(index.loc[0, "mean_batch_size"])
    assert (run_dir / "figures" / "memory_over_time.png").stat().st_size > 0
