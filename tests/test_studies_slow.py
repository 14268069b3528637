"""Slow tier: every experiment runs end to end on a short trace, then every figure draws."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.results import load_index

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
SHORT = {"backend=hf": ["workload.num_requests=2"], "backend=sim": ["workload.duration_s=30"]}


def backend_of(name: str) -> str:
    text = (ROOT / "conf" / "experiment" / f"{name}.yaml").read_text()
    return "backend=hf" if "override /backend: hf" in text else "backend=sim"


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_every_job(experiment, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", "-m", f"experiment={experiment}",
                           *SHORT[backend_of(experiment)], "progress=false", f"results_dir={tmp_path}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = load_index(tmp_path / "index.jsonl")
    assert len(index) >= 2 and (index["num_finished"] > 0).all()
    assert index["experiment"].nunique() == 1
