"""The one naming scheme (allocator labels, run names, tags) and finding offline W&B runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.loggers.sync import find_offline_runs
from kvbench.results.naming import allocator_label, cell, run_name

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name,reserve,choice,label", [
    ("buddy", "max", "orca-max", "orca-max"),
    ("buddy", "pow2", "orca-pow2", "orca-pow2"),
    ("buddy", "oracle", "orca-oracle", "orca-oracle"),
    ("buddy", "pow2", "orca-max", "orca-pow2"),  # knobs overridden after choosing orca-max
    ("buddy", "max", None, "orca-max"),  # outside Hydra: derived the same way
    ("buddy", "double", "buddy", "buddy-double"),
    ("contiguous", "oracle", "contiguous-oracle", "contiguous-oracle"),
    ("contiguous", "max", "contiguous", "contiguous"),
    ("paged", None, "paged", "paged"),
    ("vattention", None, "vattention-64k", "vattention-64k"),
])
def test_allocator_label_is_the_config_name(name, reserve, choice, label):
    assert allocator_label(name, reserve, choice) == label


def test_orca_variants_get_three_labels_and_names():
    labels = {allocator_label("buddy", r) for r in ("max", "pow2", "oracle")}
    assert labels == {"orca-max", "orca-pow2", "orca-oracle"}
    fields = {"allocator_label": "orca-max", "block_size": 16, "workload": "sharegpt", "request_rate": 2.0}
    assert run_name(fields) == "orca-max-bs16-sharegpt-r2"
    assert cell(None) == cell(float("nan")) == cell("None") == "-" and cell(0.123456) == "0.1235"


def _offline_run(tmp_path: Path, run_dir: Path) -> Path:
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
           "WANDB_CONSOLE": "off", "WANDB_X_DISABLE_STATS": "true"}
    code = ("from kvbench.loggers import build_logger; "
            "lg = build_logger({'name': 'wandb', 'mode': 'offline'}); "
            f"lg.start({{'allocator': {{'name': 'buddy', 'reserve': 'max'}}}}, run_id='r1', name=None, "
            f"run_dir={str(run_dir)!r}); lg.finish()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, timeout=120)
    return next((run_dir / "wandb").glob("offline-run-*"))


def test_kvbench_sync_finds_offline_runs_and_fails_clearly_without_network(tmp_path):
    pytest.importorskip("wandb")
    run = _offline_run(tmp_path, tmp_path / "results" / "runs" / "adhoc" / "r1")
    assert find_offline_runs([tmp_path / "results"]) == [run]
    sync = [sys.executable, "-m", "kvbench.loggers.sync"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([*sync, "--list", str(tmp_path / "results")], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and listed.stdout.strip() == str(run)
    # no login and an unreachable server: one clear line, exit 1
    offline = {**env, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_API_KEY": "x" * 40,
               "WANDB_CONFIG_DIR": str(tmp_path / "cfg"), "WANDB_HTTP_TIMEOUT": "2"}
    proc = subprocess.run([*sync, "--timeout", "10", str(tmp_path / "results")], capture_output=True, text=True,
                          env=offline, timeout=120)
    assert proc.returncode == 1 and "kvbench-sync: wandb sync" in proc.stderr
    empty = subprocess.run([*sync, "--list", str(tmp_path / "cfg")], capture_output=True, text=True, env=env)
    assert empty.returncode in (1, 2) and "kvbench-sync:" in empty.stderr
