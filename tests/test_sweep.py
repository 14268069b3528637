"""Multiruns with any sweeper: the pre-check expands what the basic sweeper can and leaves
intervals to the sweeper; every multirun ends with one comparison table; metrics config."""
from __future__ import annotations

import pytest

from kvbench.results.store import load_index
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
    header = out[out.index(SWEEP_END):].splitlines()[1].split()
    assert header[:3] == ["engine.max_num_batched_tokens", "allocator.block_size", "status"]
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


def _table(out: str) -> list[list[str]]:
    """The end-of-multirun table's lines, split into cells (header first)."""
    lines = out[out.index(SWEEP_END):].splitlines()[1:]
    return [line.split() for line in lines if line.strip() and not line.startswith("[")]


def test_multirun_table_has_a_column_per_swept_key_sorted_by_their_values(tmp_path):
    proc = kvbench("-m", "allocator=paged,orca-max", "workload.request_rate=2,1", f"results_dir={tmp_path}",
                   *QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    table = _table(out)
    header, rows = table[0], table[1:5]
    assert header[:3] == ["allocator", "workload.request_rate", "status"]
    assert {"mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "granularity"} <= set(header)
    assert [r[:2] for r in rows] == [["orca-max", "1"], ["orca-max", "2"], ["paged", "1"], ["paged", "2"]]
    assert all(r[2] == "ok" for r in rows)
    assert out.count("Serving Benchmark Result") == 4  # every job prints its serving block


def _sweep_config(tmp_path, job_num: int, overrides: list[str]):
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    sweep = tmp_path / "runs" / "adhoc" / "sweep"
    return OmegaConf.create({
        "results_dir": str(tmp_path), "optimized_metric": "request_throughput", "logger": {"name": "none"},
        "hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(sweep)}, "job": {"num": job_num},
                  "runtime": {"output_dir": str(sweep / f"job-{job_num}")},
                  "overrides": {"task": ["allocator=paged", "workload.request_rate=4,8"]},
                  "sweeper": {"params": None}}})


@pytest.mark.parametrize("outcome", ["raised", "returned_none", "returned_nan", "returned_marker"])
def test_a_failed_job_is_a_failed_row(tmp_path, caplog, outcome):
    from hydra.core.utils import JobReturn, JobStatus

    from kvbench.run.sweep import ComparisonTable

    callback = ComparisonTable()
    for num, rate in enumerate(("8", "4")):
        ret = JobReturn(overrides=["allocator=paged", f"workload.request_rate={rate}"])
        if rate == "8" and outcome == "raised":
            ret.status, ret._return_value = JobStatus.FAILED, ValueError("engine.kv_cache_bytes: too small")
        elif rate == "8":
            ret.status = JobStatus.COMPLETED
            ret._return_value = {"returned_none": None, "returned_nan": float("nan"),
                                 "returned_marker": {"failed": True, "error": "engine.kv_cache_bytes: too small"}}[outcome]
        else:  # a job that finished: its summary.json exists and its row is in the index
            cfg = _sweep_config(tmp_path, num, [])
            run_dir = tmp_path / "runs" / "adhoc" / "sweep" / f"job-{num}"
            from kvbench.results.store import write_run
            import pandas as pd

            write_run(run_dir, {"run_id": "r4", "allocator": "paged", "block_size": 16, "request_rate": 4.0,
                                "request_throughput": 3.5, "mean_ttft_ms": 31670.0},
                      pd.DataFrame(), pd.DataFrame(), tmp_path / "index.jsonl")
            ret.status, ret._return_value = JobStatus.COMPLETED, 3.5
        callback.on_job_end(_sweep_config(tmp_path, num, []), ret)
    with caplog.at_level("INFO", logger="kvbench"):
        callback.on_multirun_end(_sweep_config(tmp_path, 0, []))
    text = caplog.text
    assert "2 run(s) of this sweep, 1 failed" in text
    table = _table(text)
    assert table[0][:2] == ["workload.request_rate", "status"]  # allocator=paged was not swept
    assert [r[:2] for r in table[1:3]] == [["4", "ok"], ["8", "failed"]]
    assert "31670" in table[1] and "3.167e+04" not in text
    if outcome in ("raised", "returned_marker"):
        assert "too small" in text
