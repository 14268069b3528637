"""Slow tier: every experiment runs end to end on a short trace, then every figure draws."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.results.store import load_index

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))


def short_run(name: str) -> list[str]:
    """Overrides that make the experiment quick: a 30 s trace where it has a finite rate, else
    (every request at time 0, a replayed trace) fewer requests."""
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={name}"])
    if cfg.backend.name == "hf":
        return ["workload.num_requests=2"]
    rate = cfg.workload.get("request_rate")
    if rate is not None and "duration_s" in cfg.workload and float(rate) != float("inf"):
        return ["workload.duration_s=30"]
    return ["workload.num_requests=60"]


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_every_job(experiment, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", "-m", f"experiment={experiment}",
                           *short_run(experiment), "progress=false", f"results_dir={tmp_path}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = load_index(tmp_path / "index.jsonl")
    assert len(index) >= 2 and (index["num_finished"] > 0).all()
    assert index["experiment"].nunique() == 1
