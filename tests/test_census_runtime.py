"""The runtime census of issue 31 (``tests/census_runtime.py``), fast part: every trace-record and
W&B case in-process, the run-dir claim, and a handful of signals at random moments in real
processes. The sweeps, run-dir races, full disks and the rest are in ``test_census_runtime_slow.py``."""
from __future__ import annotations

import random
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import census_runtime as cr  # noqa: E402

from kvbench.config.errors import ConfigError  # noqa: E402
from kvbench.run.rundir import RUNNING_FILE, claim_run_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_the_census_holds_at_least_80_new_cases():
    assert len(cr.INPROCESS_IDS) + len(cr.process_cases()) >= 80


@pytest.mark.parametrize("case_id", cr.INPROCESS_IDS)
def test_inprocess_case_gets_its_right_outcome(case_id, tmp_path):
    result = cr.run_inprocess_case(case_id, tmp_path)
    assert result["outcome"] == "right", result


def test_a_null_timestamp_is_refused_naming_its_record(tmp_path):
    case = next(c for c in cr.TRACE_CASES if c.case_id == "mooncake-timestamp-null")
    result = cr.run_trace_case(case, tmp_path)
    assert "record 5 has timestamp null" in result["detail"]


def test_claim_takes_a_run_dir_once(tmp_path):
    run_dir = tmp_path / "a" / "run"
    claim_run_dir(run_dir)
    assert (run_dir / RUNNING_FILE).exists()
    with pytest.raises(ConfigError, match="hydra.run.dir: .* taken by another kvbench run"):
        claim_run_dir(run_dir)


def test_claim_accepts_an_empty_folder_and_leaves_it_ours(tmp_path):
    claim_run_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [RUNNING_FILE]


@pytest.mark.parametrize("try_number", range(3))
def test_a_signal_at_a_random_moment_is_one_line_and_its_code(try_number, tmp_path):
    rng = random.Random(try_number)
    sig = (signal.SIGINT, signal.SIGTERM)[try_number % 2]
    result = cr.signal_case(ROOT, tmp_path, sig, round(rng.uniform(0.0, 1.6), 3))
    assert result["outcome"] == "right", result


def test_a_sweep_job_that_left_no_run_and_no_record_counts_as_failed(tmp_path, monkeypatch):
    from kvbench.run import jobresult

    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "summary.json").write_text("{}")
    monkeypatch.setattr(jobresult, "PLANNED", {"dirs": [tmp_path], "multirun": True, "jobs": 3})
    assert jobresult._unrecorded_failures(tmp_path, []) == 2
    assert jobresult._unrecorded_failures(tmp_path, [{"job": 1, "kept": False}]) == 1
    monkeypatch.setattr(jobresult, "PLANNED", {"dirs": [tmp_path], "multirun": True, "jobs": None})
    assert jobresult._unrecorded_failures(tmp_path, []) == 0


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_swallowed_signal_still_decides_the_exit(sig, code, monkeypatch, capsys):
    from kvbench.run import job as app  # _signal_wins and the PLANNED its cleanup reads
    from kvbench.run import signals

    monkeypatch.setattr(app, "PLANNED", {})
    monkeypatch.setattr(signals, "_RECEIVED", [sig])
    assert app._signal_wins(0) == code
    assert app._signal_wins(2) == code
    assert app._signal_wins(code) == code
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert len(lines) == 2 and all(ln.startswith("kvbench: ") for ln in lines)
    monkeypatch.setattr(signals, "_RECEIVED", [])
    assert app._signal_wins(0) == 0
