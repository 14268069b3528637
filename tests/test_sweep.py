"""Multiruns with any sweeper: the pre-check expands what the basic sweeper can and leaves
intervals to the sweeper; every multirun ends with one comparison table; metrics config."""
from __future__ import annotations

import pytest

from kvbench.results import load_index
from tests.test_app import QUICK, kvbench

SWEEP_END = "run(s) of this sweep"


def test_basic_multirun_ends_with_one_table_and_each_job_logs_to_its_app_log(tmp_path):
    proc = kvbench("-m", "allocator=orca-max,orca-pow2,orca-oracle", f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert out.count(SWEEP_END) == 1
    table = out[out.index(SWEEP_END):]
    assert all(label in table for label in ("orca-max", "orca-pow2", "orca-oracle"))
    index = load_index(tmp_path / "index.jsonl")
    assert sorted(index["allocator_label"]) == ["orca-max", "orca-oracle", "orca-pow2"]
    for run_dir in index["run_dir"]:
        log = (tmp_path / run_dir / "app.log").read_text()
        assert "results: " in log and "allocator_label" in log


def test_optuna_interval_sweep_runs_and_returns_the_configured_metric(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = kvbench("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.direction=maximize",
                   "engine.max_num_batched_tokens=int(interval(256,4096))", "allocator.block_size=tag(bs, choice(8,16))",
                   "optimized_metric=request_goodput", "metrics.goodput=ttft:2000 tpot:200",
                   f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "Best value:" in out and out.count(SWEEP_END) == 1
    index = load_index(tmp_path / "index.jsonl")
    assert len(index) == 2 and index["request_goodput"].notna().all()
    best = float(out.split("Best value:")[1].split()[0])
    assert best == pytest.approx(index["request_goodput"].max())


def test_optuna_pre_check_still_catches_a_bad_choice(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = kvbench("-m", "hydra/sweeper=optuna", "engine.max_num_batched_tokens=int(interval(256,4096))",
                   "allocator.block_size=choice(3,16)", f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 2 and "block_size" in proc.stderr
    assert not (tmp_path / "index.jsonl").exists()


@pytest.mark.parametrize("override", ["metrics.goodput=ttft", "metrics.percentiles=[0]", "metrics.goodput=itl:5"])
def test_bad_metrics_config_exits_2(tmp_path, override):
    proc = kvbench(override, f"results_dir={tmp_path}", *QUICK, cwd=tmp_path)
    assert proc.returncode == 2 and "metrics." in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_configured_percentiles_and_goodput_reach_the_summary(tmp_path):
    proc = kvbench("metrics.percentiles=[50,99.9]", "metrics.goodput=e2el:100000", f"results_dir={tmp_path}",
                   *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = load_index(tmp_path / "index.jsonl").iloc[0]
    assert row["p99.9_itl_ms"] >= row["p50_itl_ms"] > 0
    assert row["request_goodput"] == pytest.approx(row["request_throughput"])  # every request within 100 s
    out = proc.stdout + proc.stderr
    assert "results: " in out and "Serving Benchmark Result" in out and "P99.9 ITL (ms):" in out
