"""The Hydra census (``tests/census_hydra_cases.py``): every case gets its right outcome from the
in-process pre-check: one line (no traceback, no "could not be checked") holding the case's text and
nothing written for a refusal; a pass, with its note where two settings both hold, for the rest.
The fast tier runs every case of the classes that cost little and a sample of the others (each
kind and outcome); the slow tier runs all. A few cases run as real ``kvbench`` processes: a run
from a user's folder, and refusals that exit 2 with one line.

    python scripts/census_hydra.py [--code DIR]    # counts right / silent / traceback / lost
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import census_hydra_cases as cc
from kvbench.run import precheck as app  # precheck and its NOTES
from kvbench.config.errors import CONF_DIR
from tests.test_app import ROOT

CASES = cc.cases()
# the fast tier: the cases of one job that build no data workload or hf model (the search path
# through -cd and hydra.searchpath; --config-dir and --config-dir= are the same flag), and one case
# of each (kind, expect) besides; the slow tier runs the rest
_HEAVY = ("workload=sharegpt", "workload=azure_conv", "workload=mooncake_conversation", "backend=hf",
          "experiment=paper-pressure", "-m")
_SAMPLE = {(c.kind, c.expect): c.name for c in reversed(CASES)}
FAST = [c for c in CASES if c.name in _SAMPLE.values()
        or not (any(a.startswith(_HEAVY) for a in c.args) or c.name.endswith(("-config-dir", "-cd-eq")))]
SLOW = [c for c in CASES if c not in FAST]


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    return cc.make_user_dir(tmp_path_factory.mktemp("userconf"), CONF_DIR)


def test_census_has_at_least_90_cases_of_every_class():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 90 and kinds == {"path", "conflict", "launcher", "extra", "struct", "form"}
    assert {c.expect for c in CASES} == {"ok", "note", "refuse"}


def _check(case: cc.Case, user_dir: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    error = app.precheck(cc.args_for(case, user_dir, CONF_DIR, results))
    notes = list(app.NOTES)
    assert cc.classify(case, error, False, notes) == "right", (case, error, notes)
    assert not results.exists(), f"{case.name}: the pre-check wrote {results}"


@pytest.mark.parametrize("case", FAST, ids=[c.name for c in FAST])
def test_census_case(case, user_dir, tmp_path):
    _check(case, user_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=[c.name for c in SLOW])
def test_census_case_slow(case, user_dir, tmp_path):
    _check(case, user_dir, tmp_path)


def _kvbench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "kvbench.app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_run_from_a_user_folder_uses_its_gpu_and_model(user_dir, tmp_path):
    proc = _kvbench(["-cd", str(user_dir), "gpu=mygpu", "model=mymodel", "workload.num_requests=5",
                     "progress=false", f"results_dir={tmp_path}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert row["gpu_profile"] == "mygpu" and row["model"] == "mymodel"


@pytest.mark.parametrize("args,text", [
    (["engine.max_concurrency=4"], "it lives in workload.max_concurrency"),
    (["-m", "hydra/launcher=joblib", "hydra.launcher.backend=foo", "allocator=paged,buddy"], "hydra.launcher.backend"),
    (["workload.num_requests=50", "workload.duration_s=10", "workload.request_rate=2"], "would be ignored"),
], ids=["struct-key", "joblib-backend", "count-and-duration"])
def test_refusals_are_one_line_exit_2_and_write_nothing(args, text, tmp_path):
    results = tmp_path / "results"
    proc = _kvbench([*args, f"results_dir={results}"], tmp_path)
    assert proc.returncode == 2 and text in proc.stderr, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("kvbench: error: ")
    assert not results.exists() and not (tmp_path / "outputs").exists()
