"""The census of issue 54 (``tests/census_iv_cases.py``): at least 250 cases of its six classes,
classified by outcome. The slow tier runs every case and holds the thresholds (0 tracebacks, 0
lost, 0 hangs, at most 1% silent), printing the table by class; the fast tier runs a fixed sample.
Each case runs in its own copy of one workspace (a results folder of two tiny simulated runs and a
folder of operator tables); nothing outside the workspace is written.

    .venv/bin/python -m pytest -q -m slow tests/test_census_iv.py -s
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import census_iv_cases as cc
import tests.test_validate_tables as tables_helpers
from tests.test_tool_outputs import _sim_runs, no_stale_log_handlers  # noqa: F401 (an autouse fixture)

ROOT = Path(__file__).resolve().parent.parent
CASES = cc.cases()
BY_NAME = {c.name: c for c in CASES}
# the fast tier: a fixed sample, a few of each class and expected outcome
SAMPLE = [
    "grammar:capacity --high inf", "grammar:capacity --growth nan", "grammar:capacity --slo given twice",
    "grammar:validate --peak-flops 1e400", "grammar:kvbench ++seed=3", "grammar:validate --out without --fit-ops",
    "writer:kvbench-results onto the index", "writer:kvbench-report onto a link to a file",
    "writer:kvbench-plot onto a directory", "writer:kvbench-validate onto new",
    "writer:kvbench-report onto a run's summary", "tables:time_stats.add.median='inf'",
    "tables:num_tensor_parallel_workers=0", "tables:header only", "tables:--name 'a: b'",
    "dropped:plot x inf", "dropped:report y null", "dropped:results --compare y absent",
    "dropped:report --metrics workload", "dropped:results --compare y inf",
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("census_iv")
    _sim_runs(root / "results")
    tables_helpers.write_table(root / "tables" / "m" / "mlp.csv", tables_helpers.shipped_rows())
    (root / "out").mkdir()
    return root


def _run(case: cc.Case, pristine: Path, tmp_path: Path) -> tuple[str, str]:
    workspace = tmp_path / "".join(c if c.isalnum() else "_" for c in case.name)[:80]  # no = or + for Hydra
    shutil.copytree(pristine, workspace, symlinks=True)
    return cc.run_case(case, workspace)


def test_the_census_has_250_cases_of_every_class():
    assert len(CASES) >= 250 and len({c.name for c in CASES}) == len(CASES)
    assert {c.cls for c in CASES} | {"signals"} == set(cc.CLASSES)
    assert set(SAMPLE) <= set(BY_NAME), set(SAMPLE) - set(BY_NAME)


@pytest.mark.parametrize("name", SAMPLE)
def test_census_sample(name, pristine, tmp_path):
    case = BY_NAME[name]
    outcome, err = _run(case, pristine, tmp_path)
    assert outcome in ("clear", "ok"), (outcome, err[-2000:])


# ------------------------------------------------------------------------------ class 6: signals
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


def _signal_case(args: list[str], sig: int, cwd: Path, marker: str) -> str:
    """Run ``python args`` in ``cwd``, signal it once ``marker`` shows; the outcome."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true")
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + cc.LIMIT_S
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line or marker in line:
            break
    time.sleep(0.5)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "hang"
    if "Traceback" in err:
        return "traceback"
    want = 130 if sig == signal.SIGINT else 143
    lines = err.strip().splitlines()
    if proc.returncode == want and len(lines) == 1:
        return "clear"
    return "silent" if proc.returncode in (0, -sig) and not lines else "unclear"


def signal_outcomes(tmp_path: Path) -> list[tuple[cc.Case, str]]:
    out = []
    for sig, _ in SIGNALS:
        results = tmp_path / f"cap{sig}"
        args = ["-m", "kvbench.tools.capacity", f"results_dir={results}", *cc.TINY[:-2], "logger=none",
                "workload.num_requests=4000", "--slo", "p99_ttft_ms=1e9", "--low", "1", "--high", "64"]
        args = [a for a in args if a != "workload.num_requests=4"]
        case = cc.Case(f"signals:kvbench-capacity {signal.Signals(sig).name}", "signals", "kvbench-capacity",
                       lambda ws: args, "refuse")
        out.append((case, _signal_case(args, sig, tmp_path, "probe paged")))
        run = ["-m", "kvbench.app", f"results_dir={tmp_path / f'run{sig}'}", *cc.TINY[:-2], "logger=none",
               "workload.num_requests=200000"]
        run = [a for a in run if a != "workload.num_requests=4"]
        case = cc.Case(f"signals:kvbench {signal.Signals(sig).name}", "signals", "kvbench", lambda ws: run, "refuse")
        out.append((case, _signal_case(run, sig, tmp_path, "operator constants")))  # its first log line
    return out


# ------------------------------------------------------------------------------ the whole census
def _table(rows: list[tuple[cc.Case, str]]) -> str:
    counts = Counter((case.cls, outcome) for case, outcome in rows)
    lines = [f"{'class':<10}" + "".join(f"{o:>10}" for o in cc.OUTCOMES) + f"{'total':>8}"]
    for cls in cc.CLASSES:
        lines.append(f"{cls:<10}" + "".join(f"{counts[cls, o]:>10}" for o in cc.OUTCOMES)
                     + f"{sum(counts[cls, o] for o in cc.OUTCOMES):>8}")
    lines.append(f"{'all':<10}" + "".join(f"{sum(counts[c, o] for c in cc.CLASSES):>10}" for o in cc.OUTCOMES)
                 + f"{len(rows):>8}")
    return "\n".join(lines)


@pytest.mark.slow
def test_census_iv_thresholds(pristine, tmp_path):
    rows, wrong = [], []
    for case in CASES:
        outcome, err = _run(case, pristine, tmp_path)
        rows.append((case, outcome))
        if outcome not in ("clear", "ok"):
            wrong.append(f"{outcome:<10} {case.name}: {err.strip().splitlines()[-1] if err.strip() else '(no line)'}")
    rows += signal_outcomes(tmp_path)
    wrong += [f"{o:<10} {c.name}" for c, o in rows[len(CASES):] if o != "clear"]
    report = _table(rows) + "\n" + "\n".join(wrong)
    print("\n" + report)
    counts = Counter(outcome for _, outcome in rows)
    assert len(rows) >= 250
    assert counts["traceback"] == counts["lost"] == counts["hang"] == 0, report
    assert counts["silent"] <= 0.01 * len(rows), report
