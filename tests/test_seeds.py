"""Issue 53, part 2: one seed. The top-level ``seed`` seeds every random choice of a run unless a
group sets its own (``workload.seed``); the summary records the seeds used (``seed``,
``workload_seed``); a seed sweep gives a different trace on every workload."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kvbench.config.errors import CONF_DIR
from kvbench.config.seeds import resolve_seeds, seeds_used
from kvbench.engine.policy_checks import policy_knobs
from kvbench.run.lifecycle import run
from kvbench.run.prepare import prepare

WORKLOADS = sorted(p.stem for p in (Path(CONF_DIR) / "workload").glob("*.yaml"))
# a model whose context holds the long traces' prompts (mooncake: 12K tokens on average)
LONG = ["model=llama-3-8b", "gpu=h100-80gb", "model.max_model_len=32768"]


def _cfg(*overrides: str, results: Path | None = None):
    extra = [f"results_dir={results}"] if results is not None else []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[*overrides, "progress=false", "logger=none", *extra])


def _trace(workload: str, *overrides: str) -> list[tuple[int, int, float]]:
    """(prompt length, output length, arrival) per request, built as a run builds its stream."""
    cfg = _cfg(f"workload={workload}", "workload.num_requests=12", *LONG, *overrides)
    requests = prepare(cfg).workload.requests
    assert requests
    return [(r.prompt_len, r.output_len, r.arrival_s) for r in requests]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_seed_sweep_draws_another_trace_on_every_workload(workload):
    rate = [] if workload.startswith(("azure", "mooncake")) else ["workload.request_rate=2.0"]
    seed0, seed1 = _trace(workload, "seed=0", *rate), _trace(workload, "seed=1", *rate)
    assert seed0 != seed1
    assert [r[:2] for r in seed0] != [r[:2] for r in seed1] or [r[2] for r in seed0] != [r[2] for r in seed1]
    assert _trace(workload, "seed=1", *rate) == seed1  # and the same seed the same trace


def test_an_explicit_workload_seed_wins_and_is_recorded():
    cfg = _cfg("seed=3", "workload.seed=7")
    resolve_seeds(cfg)
    assert cfg.workload.seed == 7 and seeds_used(cfg) == {"seed": 3, "workload_seed": 7}
    inherited = _cfg("seed=3")
    resolve_seeds(inherited)
    assert inherited.workload.seed == 3 and seeds_used(inherited) == {"seed": 3, "workload_seed": 3}
    # the explicit one draws the trace: workload.seed=7 under seed 3 is seed 7's trace
    assert _trace("synthetic", "seed=3", "workload.seed=7") == _trace("synthetic", "seed=7")


def test_the_summary_records_the_seeds_used(tmp_path):
    small = ["workload=sharegpt", "workload.num_requests=6"]
    swept = run(_cfg(*small, "workload.seed=2", results=tmp_path), run_dir=tmp_path / "a", run_id="a")
    assert (swept["seed"], swept["workload_seed"]) == (0, 2)
    one = run(_cfg(*small, "seed=5", results=tmp_path), run_dir=tmp_path / "b", run_id="b")
    assert (one["seed"], one["workload_seed"]) == (5, 5)
    written = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (written["seed"], written["workload_seed"]) == (5, 5)
    assert one["mean_prompt_len"] != swept["mean_prompt_len"]  # seed 5 drew other requests than seed 2


def test_the_engine_and_the_sim_executor_draw_from_the_run_seed():
    """sjf's predictor noise (engine.sjf_error) and sim's placeholder tokens follow ``seed``."""
    cfg = _cfg("seed=4", "engine.policy=sjf", "engine.sjf_error=0.5")
    assert policy_knobs(cfg)["seed"] == 4
    assert prepare(cfg).executor._rng.getstate() == random.Random(4).getstate()
