"""Engine speed on the simulated GPU: ten simulated minutes of ShareGPT at 2 req/s, OPT-13B.

`scripts/bench_sim_hour.py` runs the issue's full hour; this guards the per-step cost.
"""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from kvbench.run.prepare import prepare
from kvbench.config.errors import CONF_DIR
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


SIM_GATE_ALLOCATORS = ("paged", "paged_prefix", "orca-max")


class SimRun:
    """A fixed simulated run for the bench gate: 64 synthetic requests at t=0 (64-token prompts,
    96 output tokens), OPT-13B on one A100-40GB, about 6K sequence-steps, nearly all in plain decode.
    ``prepare`` (untimed) builds a fresh allocator, executor and engine; ``run`` is timed."""

    def __init__(self, allocator: str) -> None:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            self.cfg = compose(config_name="config", overrides=[
                f"allocator={allocator}", "workload=synthetic", "workload.num_requests=64",
                "workload.prompt_len=64", "workload.output_len=96", "progress=false", "logger=none"])
        self.engine = self.requests = None

    def prepare(self) -> None:
        prep = prepare(self.cfg)
        self.requests = prep.workload.requests
        self.engine = Engine(prep.allocator, prep.executor,
                             SchedulerConfig(max_model_len=int(self.cfg.model.max_model_len)))

    def run(self) -> None:
        self.engine.run(self.requests)


@pytest.mark.parametrize("allocator", SIM_GATE_ALLOCATORS)
def test_bench_sim_gate_run(benchmark, allocator):
    sim = SimRun(allocator)
    benchmark.group = "engine, the bench gate's sim run"
    benchmark.pedantic(sim.run, setup=sim.prepare, rounds=3, iterations=1)
