"""The pre-check expands a multirun's jobs as Hydra's basic sweeper will: the experiment's
``hydra.sweeper.params`` first, then the command line, the command line winning for a key in both;
the checks, ``PLANNED["jobs"]`` and the "every job ignores this setting" rule see those jobs."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.results.store import load_index
from kvbench.run import precheck as pc
from kvbench.run.precheck import PLANNED, precheck
from tests.test_app import kvbench

HYBRID_REFUSAL = "allocator paged: model qwen3-next-80b-a3b has state layers"


def user_conf(tmp_path: Path, params: dict[str, str], name: str = "mine") -> Path:
    """A config dir (``--config-dir``) with experiment ``name`` sweeping ``params``."""
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    # the hybrid study's GPU and pool (the 80B models' weights skip the fit check at an explicit size)
    lines = ["# @package _global_", "defaults:", "  - override /gpu: h100-80gb", f"experiment_name: {name}",
             "engine:", "  kv_cache_bytes: 22210936320", "hydra:", "  sweeper:", "    params:"]
    lines += [f"      {key}: {value}" for key, value in params.items()]
    (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return tmp_path / "conf"


def run_precheck(tmp_path: Path, *args: str) -> str | None:
    return precheck(["-m", *args, f"results_dir={tmp_path / 'results'}"])


def test_the_issue_command_passes_on_the_experiments_allocators(tmp_path):
    # the experiment sweeps allocator=uniform,hybrid_static,hybrid,lcm: paged never runs
    assert run_precheck(tmp_path, "experiment=hybrid-study-mooncake", "model=qwen3-next-80b-a3b",
                        "workload.duration_s=1") is None
    assert PLANNED["jobs"] == 4  # the model given, the four allocators of the params
    assert not (tmp_path / "results").exists()


def test_a_value_only_the_params_reach_is_checked(tmp_path):
    conf = user_conf(tmp_path, {"model": "opt-13b,qwen3-next-80b-a3b"})
    error = run_precheck(tmp_path, "-cd", str(conf), "experiment=mine")  # the default allocator: paged
    assert error is not None and error.startswith(HYBRID_REFUSAL)
    # a command-line sweep of another key still takes the params' models
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine", "seed=0,1").startswith(HYBRID_REFUSAL)
    # and the params' allocators for the issue's shape: paged is reached only through them
    conf = user_conf(tmp_path, {"allocator": "hybrid,paged"}, name="allocs")
    error = run_precheck(tmp_path, "-cd", str(conf), "experiment=allocs", "model=qwen3-next-80b-a3b")
    assert error is not None and error.startswith(HYBRID_REFUSAL)


def test_the_command_line_replaces_the_params_values_of_its_keys(tmp_path):
    conf = user_conf(tmp_path, {"model": "opt-13b,qwen3-next-80b-a3b", "seed": "0,1,2"})
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine", "model=opt-13b,llama-7b") is None
    assert PLANNED["jobs"] == 6  # 2 models of the command line x 3 seeds of the params
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine", "model=opt-13b") is None
    assert PLANNED["jobs"] == 3
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine", "model=opt-13b", "seed=4") is None
    assert PLANNED["jobs"] == 1


def test_a_single_run_ignores_the_params(tmp_path):
    conf = user_conf(tmp_path, {"model": "opt-13b,qwen3-next-80b-a3b"})
    assert precheck(["-cd", str(conf), "experiment=mine", f"results_dir={tmp_path / 'results'}"]) is None


def test_an_experiment_sweep_takes_the_primary_configs_params(tmp_path):
    # Hydra composes the multirun's config without its sweeps, so experiment=a,b reads the params of
    # neither a nor b (conf/config.yaml has none): one job per experiment, each on its own defaults
    conf = user_conf(tmp_path, {"model": "opt-13b,qwen3-next-80b-a3b"})
    user_conf(tmp_path, {"seed": "0,1,2"}, name="other")
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine,other") is None
    assert PLANNED["jobs"] == 2


def test_a_large_sweep_checks_each_group_combination_and_each_value(tmp_path, monkeypatch):
    checked: list[list[list[str]]] = []
    choose = pc._jobs_to_check

    def spy(jobs, groups):
        checked.append(choose(jobs, groups))
        return checked[-1]

    monkeypatch.setattr(pc, "_jobs_to_check", spy)
    assert run_precheck(tmp_path, "experiment=paper-rate-opt13b-sharegpt") is None
    assert PLANNED["jobs"] == 96  # 4 allocators x 3 seeds x 8 rates
    jobs = checked[0]
    assert len(jobs) == 13
    values = {o for job in jobs for o in job}
    assert {f"allocator={a}" for a in ("orca-max", "orca-pow2", "orca-oracle", "paged")} <= values
    assert {f"seed={s}" for s in range(3)} <= values
    assert len({o for o in values if o.startswith("workload.request_rate=")}) == 8


def test_a_bad_value_of_the_params_on_a_later_combination_is_refused(tmp_path):
    conf = user_conf(tmp_path, {"allocator": "uniform,paged", "model": "opt-13b,qwen3-next-80b-a3b"})
    error = run_precheck(tmp_path, "-cd", str(conf), "experiment=mine")
    assert error is not None and error.startswith(HYBRID_REFUSAL)
    assert run_precheck(tmp_path, "-cd", str(conf), "experiment=mine", "allocator=uniform,hybrid") is None
    assert PLANNED["jobs"] == 4


@pytest.mark.parametrize("extra", [[], ["allocator=orca-max,paged,buddy"]], ids=["params", "command line wins"])
def test_planned_jobs_are_the_jobs_hydra_launches(tmp_path, extra):
    conf = user_conf(tmp_path, {"allocator": "paged,buddy", "seed": "0,1"})
    args = ["-m", "-cd", str(conf), "experiment=mine", *extra, "workload.num_requests=5", "progress=false",
            "logger=none", f"results_dir={tmp_path / 'results'}"]
    assert precheck(args) is None
    planned = PLANNED["jobs"]
    assert planned == (6 if extra else 4)
    proc = kvbench(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    index = load_index(tmp_path / "results" / "index.jsonl")
    assert len(index) == planned
    assert sorted(set(index["allocator_label"])) == sorted(["orca-max", "paged", "buddy"] if extra else ["paged", "buddy"])


def test_a_setting_every_job_ignores_is_refused_on_a_reduced_sweep(tmp_path):
    args = ["engine.sjf_error=0.2", "seed=0,1", "workload.request_rate=1,2"]  # fcfs: 4 jobs, 3 checked
    error = run_precheck(tmp_path, *args)
    assert error is not None and "engine.sjf_error" in error
    assert run_precheck(tmp_path, *args, "engine.policy=fcfs,sjf") is None  # the sjf jobs read it


def test_a_setting_read_only_by_a_job_left_unchecked_passes(tmp_path, monkeypatch):
    # a setting read under two plain values together only: the job that reads it is not among the
    # checked ones (one per group combination and value), and the refusal is confirmed on the rest
    def conflicts(cfg, overrides):
        reads = {"seed=1", "workload.request_rate=2"} <= set(overrides)
        return [], {} if reads else {"engine.sjf_error": "engine.sjf_error: not read by this job"}

    monkeypatch.setattr(pc, "check_conflicts", conflicts)
    assert run_precheck(tmp_path, "engine.sjf_error=0.2", "seed=0,1", "workload.request_rate=1,2") is None
    assert run_precheck(tmp_path, "engine.sjf_error=0.2", "seed=0,1", "workload.request_rate=1,3") is not None
