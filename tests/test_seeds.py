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


# --- seeds as the repeat axis: n, sd and the 95% t interval wherever runs are averaged ------------
# paged over seeds 0, 1, 2 gives 1, 2, 4 req/s: mean 7/3, sd sqrt(7/3) = 1.5275 (ddof 1), and the
# 95% interval's half-width t(0.975, 2) * sd / sqrt(3) = 4.3027 * 0.8819 = 3.7946; orca-max gives
# 2, 2, 2: sd 0, half-width 0. Its workload seed was swept too (workload_seed 10, 11, 12).
THROUGHPUT = {"paged": (1.0, 2.0, 4.0), "orca-max": (2.0, 2.0, 2.0)}
PAGED_SD, PAGED_HALF = 1.5275252, 3.7945833


def _seed_runs(root: Path) -> None:
    import pandas as pd

    from kvbench.results.store import write_run

    for label, values in THROUGHPUT.items():
        for seed, value in enumerate(values):
            row = {"run_id": f"{label}-{seed}", "experiment": "p", "allocator": label, "allocator_label": label,
                   "workload": "sharegpt", "model": "opt-13b", "gpu_profile": "a100-40gb", "request_rate": 2.0,
                   "commit": "abc", "seed": seed, "workload_seed": 10 + seed, "request_throughput": value,
                   "mean_ttft_ms": 10.0 * value}
            write_run(root / "runs" / "p" / row["run_id"], row, pd.DataFrame({"time_s": [0.0, 1.0], "mem_token_frac": [0.1, 0.2]}),
                      pd.DataFrame(), root / "index.jsonl")


def test_the_spread_of_three_seeds_by_hand():
    from kvbench.results.repeats import spread_of

    got = spread_of(THROUGHPUT["paged"])
    assert got.n == 3 and got.mean == pytest.approx(7 / 3)
    assert got.sd == pytest.approx(PAGED_SD) and got.half == pytest.approx(PAGED_HALF)
    assert (got.low, got.high) == pytest.approx((7 / 3 - PAGED_HALF, 7 / 3 + PAGED_HALF))
    one = spread_of([5.0, float("nan")])
    assert one.n == 1 and one.mean == 5.0 and one.sd != one.sd and one.half != one.half  # NaN: no spread


def test_compare_shows_n_sd_and_the_interval(tmp_path):
    from kvbench.results.compare import compare_groups
    from kvbench.results.store import load_index

    _seed_runs(tmp_path)
    [(_, table)] = compare_groups(load_index(tmp_path / "index.jsonl"), "allocator_label", "orca-max",
                                  ["request_throughput"])
    rows = table.set_index("allocator_label")
    assert list(rows["runs"]) == [3, 3]  # seeds and workload seeds are the repeat axis: one row each
    assert rows.loc["paged", "request_throughput"] == pytest.approx(7 / 3)
    assert rows.loc["paged", "request_throughput sd"] == pytest.approx(PAGED_SD)
    assert rows.loc["paged", "request_throughput ci95"] == pytest.approx(PAGED_HALF)
    assert rows.loc["orca-max", "request_throughput ci95"] == 0.0


def test_plot_points_and_the_figure_note_show_n_and_the_interval(tmp_path):
    from kvbench.tools.plot import PlotSpec, draw, points_for
    from kvbench.tools.plot_data import load_runs

    _seed_runs(tmp_path)
    loaded = load_runs(tmp_path)
    spec = PlotSpec(x="request_rate", y=["request_throughput"])
    points = points_for(spec, loaded.runs, loaded.index_path).set_index("series")
    assert points.loc["paged", "runs"] == 3
    assert (points.loc["paged", "y_sd"], points.loc["paged", "y_ci95"]) == pytest.approx((PAGED_SD, PAGED_HALF))
    fig = draw(points.reset_index(), spec, "")
    notes = [t.get_text() for t in fig.texts if t is not fig._suptitle]
    assert notes[0] == ("each point: the mean of its runs (n = 3 seeds); band or bar: 95% t interval of the mean "
                        "(sd over runs up to 1.528)")


def test_the_report_shows_the_seeds_used_n_sd_and_the_interval(tmp_path):
    from kvbench.tools.report import build_html

    _seed_runs(tmp_path)
    page = build_html(tmp_path, metrics=["request_throughput"])
    assert "seeds: seed 0, 1, 2; workload_seed 10, 11, 12." in page
    assert "request_throughput sd" in page and "request_throughput ci95" in page
    assert "1.528" in page and "3.795" in page  # paged's sd and half-width, as the table prints them


# --- kvbench-capacity over seeds --------------------------------------------------------------------
TINY_CAPACITY = ["allocator=orca-pow2", "workload.num_requests=20", "workload.distribution=uniform",
                 "workload.prompt_min=16", "workload.prompt_max=64", "workload.output_min=16",
                 "workload.output_max=64", "engine.kv_cache_bytes=500000000", "logger=none"]


def test_capacity_over_two_seeds_answers_per_seed_and_overall(tmp_path):
    from kvbench.tools.capacity import capacity

    search = dict(slo_text="p99_ttft_ms=500", low=1.0, high=32.0, tolerance=0.5, out=lambda line: None)
    answers, folder, [overall] = capacity([f"results_dir={tmp_path / 'cap'}", *TINY_CAPACITY], seeds=[0, 3],
                                          **search)
    assert [a.seed for a in answers] == [0, 3]
    for answer in answers:  # each seed's answer is that seed's own search
        [alone], _, none = capacity([f"results_dir={tmp_path / f'seed{answer.seed}'}", *TINY_CAPACITY,
                                     f"seed={answer.seed}"], **search)
        assert (alone.sustained, alone.failed_at) == (answer.sustained, answer.failed_at) and none == []
    a0, a3 = answers[0].sustained, answers[1].sustained
    assert a0 != a3  # the two seeds' streams differ, and so do their answers
    assert overall.sustained == min(a0, a3) and overall.failed_at == min(a.failed_at for a in answers)
    # the spread of two answers: sd = |a0 - a3| / sqrt 2; 95% half-width t(0.975, 1) * sd / sqrt 2
    assert overall.n == 2 and overall.mean == pytest.approx((a0 + a3) / 2)
    assert overall.sd == pytest.approx(abs(a0 - a3) / 2 ** 0.5)
    assert overall.ci95 == pytest.approx(12.7062047 * abs(a0 - a3) / 2)
    saved = json.loads((folder / "capacity.json").read_text())
    assert saved["seeds"] == [0, 3] and saved["overall"][0]["sustained"] == overall.sustained
    index = [json.loads(line) for line in (tmp_path / "cap" / "index.jsonl").read_text().splitlines()]
    assert {row["seed"] for row in index} == {0, 3} and all(r["seed"] == r["workload_seed"] for r in index)


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0,x"], "--seeds: a comma-separated list"),
    (["--seeds", "1,1"], "--seeds: distinct"),
    (["seed=2", "--seeds", "0,1"], "seed: --seeds sets the run seed"),
    (["workload.seed=2", "--seeds", "0,1"], "workload.seed: --seeds sets the run seed"),
])
def test_capacity_seeds_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    from kvbench.tools.capacity import main

    code = main([f"results_dir={tmp_path / 'res'}", *args, "--slo", "p99_ttft_ms=1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "res").exists()
