"""Reliability of inputs (fast tier): bad values by class, launcher and sweeper settings, console
scripts, sweep jobs that fail after the pre-check, and the books of every workload.

Each bad input must end in exactly one line naming what was wrong, never a traceback, and write
nothing. The cases come from ``tests/input_cases.py`` (classes, not a list). Knob cases run
in-process, composed as Hydra parses them (the pre-check's own per-job checks); flag, launcher
and sweeper cases run the whole ``precheck``; a few run as real processes here, the rest in
``test_reliability_inputs_slow.py``.
"""
from __future__ import annotations

import errno
import pickle
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

import input_cases as ic
from kvbench.run.prepare import _errors
from kvbench.run.precheck import check_composed, precheck
from kvbench.config.errors import CONF_DIR
from kvbench.run.jobresult import JobFailed, failure, read_failures, record_failure

GROUPS = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
_BASES: dict[tuple[str, ...], object] = {}
KNOB_CASES = ic.knob_cases()


def composed_check(args: list[str], results: Path) -> str | None:
    """One job's pre-check on the config Hydra would compose: the error line, or None."""
    args = ic.with_results(args, results)
    groups = tuple(a for a in args if a.lstrip("+").split("=", 1)[0] in GROUPS)
    try:
        if groups not in _BASES:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                _BASES[groups] = compose(config_name="config", overrides=list(groups))
        base = _BASES[groups]
        cfg = base.copy()
        for override in OverridesParser.create().parse_overrides([a for a in args if a not in groups]):
            with open_dict(cfg):
                OmegaConf.update(cfg, override.key_or_group, override.value(), force_add=override.is_add())
        check_composed(cfg, base)
    except _errors() as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("case_id,args", KNOB_CASES, ids=[c for c, _ in KNOB_CASES])
def test_every_knob_refuses_the_bad_values_of_its_class(case_id, args, tmp_path):
    error = composed_check(args, tmp_path / "results")
    assert error, f"{case_id} was accepted"
    assert "\n" not in error and len(error) < 400
    assert not (tmp_path / "results").exists()


def test_the_classes_cover_every_knob_kind():
    kinds = {c.split("=", 1)[1].split("|")[0] for c, _ in KNOB_CASES}
    assert {"maybe", "''", "inf", "nan", "abc", "1e300", "-1"} <= kinds
    assert len(KNOB_CASES) + len(ic.EXTRA_CASES) >= 150


GOOD = [[], ["workload=multiturn"], ["allocator=buddy", "allocator.reserve=pow2"], ["+baseline=orca-max"],
        ["metrics.percentiles=[50,99.9]"], ["+model.tie_word_embeddings=true"], ["system=vllm-2023"],
        ["logger=wandb", "logger.tags=[a,b]"], ["workload.request_rate=0.5"], ["gpu.gemm_eff_max=0.8"]]


@pytest.mark.parametrize("args", GOOD, ids=[" ".join(a) or "defaults" for a in GOOD])
def test_good_settings_still_pass(args, tmp_path):
    assert composed_check(args, tmp_path / "results") is None


PRECHECK_CASES = [c for c in ic.EXTRA_CASES if c[0] not in ic.RUN_TIME_CASES]


@pytest.mark.parametrize("case_id,args", PRECHECK_CASES, ids=[c for c, _ in PRECHECK_CASES])
def test_precheck_refuses_with_one_line(case_id, args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    error = precheck(ic.with_results(args, tmp_path / "results"))
    assert error, f"{case_id} was accepted"
    assert "\n" not in error
    assert list(tmp_path.iterdir()) == []


def test_a_dangling_results_symlink_is_refused(tmp_path):
    (tmp_path / "results").symlink_to(tmp_path / "gone")
    error = composed_check(["results_dir=" + str(tmp_path / "results" / "sub")], tmp_path / "unused")
    assert error and "is a symlink to" in error and "does not exist" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_good_sweeps_pass_the_precheck(tmp_path):
    for args in (["-m", "hydra/sweeper=optuna", "workload.request_rate=interval(1,5)"],
                 ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1"],
                 ["--multir", "seed=0,1"]):
        assert precheck(ic.with_results(args, tmp_path)) is None, args


# -- console scripts ---------------------------------------------------------------------------
def _validate_csvs(tmp: Path) -> dict[str, Path]:
    from kvbench.sim.validate import MEASUREMENTS

    lines = [ln for ln in MEASUREMENTS.read_text().splitlines() if not ln.startswith("#")]
    header, first = lines[0], lines[1]
    files = {
        "empty": "",
        "header-only": header + "\n",
        "garbage": "\x00\xff\xfe garbage",
        "no-columns": "a,b\n1,2\n",
        "zero-ms": header + "\n" + first.rsplit(",", 1)[0] + ",0\n",
        "nan-ms": header + "\n" + first.rsplit(",", 1)[0] + ",nan\n",
        "unknown-gpu": header + "\n" + first.replace("a100-80gb", "b999") + "\n",
        "unknown-model": header + "\n" + first.replace("gpt-6.7b", "gpt-7t") + "\n",
        "zero-batch": header + "\n" + first.replace(",1,1,128,", ",1,0,128,") + "\n",
    }
    out = {}
    for name, text in files.items():
        out[name] = tmp / f"{name}.csv"
        out[name].write_bytes(text.encode("utf-8", "surrogateescape") if name != "garbage" else b"\x00\xff\xfe x")
    return out


def _one_line_exit(capsys, func, argv, code=2) -> str:
    try:
        rc = func(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code, (argv, rc, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", ["empty", "header-only", "garbage", "no-columns", "zero-ms", "nan-ms",
                                  "unknown-gpu", "unknown-model", "zero-batch"])
def test_kvbench_validate_refuses_a_bad_csv(name, tmp_path, capsys):
    from kvbench.sim.validate import main

    path = _validate_csvs(tmp_path)[name]
    line = _one_line_exit(capsys, main, ["--file", str(path)])
    assert line.startswith("kvbench-validate: error:")


def test_kvbench_validate_fit_needs_enough_points(tmp_path, capsys):
    from kvbench.sim.validate import MEASUREMENTS, main

    lines = [ln for ln in MEASUREMENTS.read_text().splitlines() if not ln.startswith("#")]
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines[:2]) + "\n")
    assert "more points" in _one_line_exit(capsys, main, ["--fit", "--file", str(one)])
    model = lines[1].split('",', 1)[1].split(",")[0]
    same = tmp_path / "one-model.csv"
    same.write_text("\n".join([lines[0], *[ln for ln in lines[1:] if f'",{model},' in ln]]) + "\n")
    assert "two models" in _one_line_exit(capsys, main, ["--fit", "--file", str(same)])
    assert "unrecognized" in _one_line_exit(capsys, main, ["--fitt"])


@pytest.mark.parametrize("argv", [["--timeout", "nan"], ["--timeout", "inf"], ["--timeout", "-1"],
                                  ["--timeout", "0"], ["--timeout", "abc"], ["--project", " "], ["--nope"],
                                  ["no-such-folder"]])
def test_kvbench_sync_refuses_bad_arguments(argv, tmp_path, capsys, monkeypatch):
    from kvbench.loggers.sync import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    assert _one_line_exit(capsys, main, argv).startswith("kvbench-sync: error:")


@pytest.mark.parametrize("argv", [["--save"], ["--save", "--entity", " "], ["--project", ""], ["--name", ""],
                                  ["--save", "--json"]])
def test_kvbench_dashboard_refuses_bad_arguments(argv, capsys, monkeypatch):
    from kvbench.dashboard import main

    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    assert _one_line_exit(capsys, main, argv).startswith("kvbench-dashboard: error:")


def test_kvbench_dashboard_save_failure_is_one_line(capsys, monkeypatch):
    import kvbench.dashboard as dash

    class Offline:
        def save(self):
            raise ConnectionError("Max retries exceeded with url: /graphql\nmore detail")

    monkeypatch.setattr(dash, "build_workspace", lambda *a: Offline())
    line = _one_line_exit(capsys, dash.main, ["--save", "--entity", "nobody"], code=1)
    assert "ConnectionError: Max retries exceeded" in line


# -- sweep jobs that fail after the pre-check ------------------------------------------------------
def test_job_failed_marker_pickles_and_is_no_number():
    marker = JobFailed("disk full", "seed=1")
    assert failure(pickle.loads(pickle.dumps(marker))) == "disk full"
    assert failure(1.5) is None and failure(None) is None
    with pytest.raises(TypeError):
        float(marker)


def test_failures_are_recorded_in_the_sweep_dir(tmp_path):
    record_failure(tmp_path / "sweep", 3, "seed=3", "boom")
    with open(tmp_path / "sweep" / "failed_jobs.jsonl", "a") as f:
        f.write('{"torn"')
    assert read_failures(tmp_path / "sweep") == [{"job": 3, "overrides": "seed=3", "error": "boom", "kept": False}]
    assert read_failures(tmp_path / "missing") == []


def test_a_failing_sweep_job_is_one_line_and_the_others_finish(tmp_path, monkeypatch, capsys):
    """ENOSPC in the middle job of three: one line for it, two finished runs, exit 1."""
    import kvbench.run.job as job  # where the job looks up run()
    from kvbench.app import main
    from kvbench.run.jobresult import FailedJobs
    from kvbench.results.store import load_index

    real_run = job.run

    def run(cfg, **kwargs):
        if int(cfg.seed) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_run(cfg, **kwargs)

    monkeypatch.setattr(job, "run", run)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(FailedJobs, "failed", 0)
    results = tmp_path / "results"
    monkeypatch.setattr(sys, "argv", ["kvbench", "-m", "seed=0,1,2", "workload.num_requests=4", "progress=false",
                                      f"results_dir={results}", "hydra/job_logging=disabled"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("kvbench")]
    assert len(err) == 2 and err[0].startswith("kvbench: error: job 1 (") and "No space left" in err[0]
    assert "1 job(s) of this sweep failed" in err[1]
    index = load_index(results / "index.jsonl")
    assert sorted(index["seed"]) == [0, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_optuna_objective_of_a_run_without_the_metric_is_a_failed_trial():
    from kvbench.run.job import _objective

    optuna = OmegaConf.create({"sweeper": {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"},
                               "job": {"override_dirname": "x=1"}})
    basic = OmegaConf.create({"sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"},
                              "job": {"override_dirname": ""}})
    cfg = OmegaConf.create({"optimized_metric": "mean_ttft_ms"})
    assert _objective({"mean_ttft_ms": 12.0}, cfg, optuna) == 12.0
    assert failure(_objective({"mean_ttft_ms": None}, cfg, optuna)) == "the run reports no mean_ttft_ms"
    value = _objective({}, cfg, basic)
    assert value != value  # NaN for the basic sweeper


# -- the books: finished + rejected = requests, for every workload ------------------------------
WORKLOADS = [["workload=synthetic", "workload.distribution=uniform", "workload.prompt_max=1500"],
             ["workload=alpaca"], ["workload=alpaca_synthetic"], ["workload=sharegpt"], ["workload=sharegpt_chat"],
             ["workload=multiturn", "workload.think_time_s=0"],
             ["workload=shared_prefix", "workload.base=synthetic", "workload.prompt_len=900"],
             ["workload=system_prompts", "workload.base=synthetic"]]


@pytest.mark.parametrize("args", WORKLOADS, ids=[a[0] for a in WORKLOADS])
def test_every_request_is_finished_or_rejected(args, tmp_path):
    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*args, "workload.num_requests=16", "engine.kv_cache_bytes=8e8",
                                                      "progress=false", f"results_dir={tmp_path}"])
    summary = run(cfg, run_dir=tmp_path / "run")
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"]
    import pandas as pd

    reqs = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(reqs) == summary["num_requests"]
    assert reqs.loc[reqs["status"] == "rejected", "reason"].notna().all()


def test_a_rejected_turn_rejects_the_rest_of_its_conversation(tmp_path):
    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["workload=multiturn", "workload.num_requests=40",
                                                      "engine.kv_cache_bytes=1.2e9", "workload.think_time_s=0",
                                                      "progress=false", f"results_dir={tmp_path}"])
    summary = run(cfg, run_dir=tmp_path / "run")
    import pandas as pd

    reqs = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    follow = reqs[reqs["reason"].fillna("").str.startswith("an earlier turn of its conversation")]
    assert len(follow) > 0, reqs["reason"].value_counts()
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"] == 40


def test_a_run_that_serves_nothing_says_so(tmp_path):
    from kvbench.run.job import _nothing_served

    assert _nothing_served({"num_finished": 3, "num_rejected": 1}, tmp_path) is None
    line = _nothing_served({"num_finished": 0, "num_rejected": 5}, tmp_path)
    assert line.startswith("all 5 requests were rejected") and "\n" not in line


# -- a small sample as real processes (the rest: test_reliability_inputs_slow.py) -----------------
@pytest.mark.parametrize("case_id", ["argparse-prefix", "optuna-reversed-interval", "unknown-key"])
def test_cli_sample_exits_2_with_one_line(case_id, tmp_path):
    args = dict(ic.EXTRA_CASES)[case_id]
    out = ic.run_process(args, tmp_path)
    assert ic.classify_process(out) == "clean", out
