"""Engine speed on the simulated GPU: ten simulated minutes of ShareGPT at 2 req/s, OPT-13B.

`scripts/bench_sim_hour.py` runs the issue's full hour; this guards the per-step cost.
"""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from kvbench.app import prepare
from kvbench.config import CONF_DIR
from kvbench.engine import Engine, SchedulerConfig


@pytest.mark.parametrize("allocator", ["paged", "paged_prefix", "orca-max", "orca-oracle", "contiguous"])
def test_bench_sim_engine_ten_minutes(benchmark, allocator, tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"allocator={allocator}", "workload=sharegpt", "workload.request_rate=2.0",
            "workload.duration_s=600", f"results_dir={tmp_path}"])

    def one_run():
        prep = prepare(cfg)
        engine = Engine(prep.allocator, prep.executor, SchedulerConfig(max_model_len=int(cfg.model.max_model_len)))
        return engine.run(prep.workload.requests)

    benchmark.group = "engine, 10 simulated minutes"
    out = benchmark.pedantic(one_run, rounds=1, iterations=1)
    assert out.summary["num_finished"] == len(out.requests)
    benchmark.extra_info["steps"] = len(out.steps)
