"""Reliability tier (slow): every bad input of the table as a real ``kvbench`` process, and
kill -9 at random points of runs that share one index."""
from __future__ import annotations

import json
import random
import subprocess
import time

import pytest

import reliability_cases as rc
from kvbench.results.reindex import clean, reindex
from kvbench.results.store import run_dirs
from test_reliability import _rows, files_under, kvbench, with_base

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", rc.CASES, ids=[c[0] for c in rc.CASES])
def test_cli_refuses_bad_input_with_one_line_and_writes_nothing(case, tmp_path):
    case_id, args, setup = case
    if setup:
        try:
            rc.SETUPS[setup](tmp_path)
        except (subprocess.CalledProcessError, OSError) as exc:
            pytest.skip(f"setup needs root: {exc}")
    (tmp_path / "cwd").mkdir()
    try:
        before = files_under(tmp_path)
        proc = kvbench(*with_base(rc.expand(args, tmp_path), tmp_path / "results"), cwd=tmp_path / "cwd")
        _, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvbench: error:"), err
        assert files_under(tmp_path) == before
    finally:
        rc.teardown(tmp_path)


def test_kill_9_at_random_points_keeps_the_index_whole_and_reindex_recovers(tmp_path):
    results = tmp_path / "results"
    index = results / "index.jsonl"
    rng = random.Random(7)
    for trial in range(6):
        proc = kvbench(*with_base(["workload.num_requests=150", f"seed={trial}"], results), cwd=tmp_path)
        time.sleep(rng.uniform(0.5, 6.0))
        proc.kill()
        proc.wait()
        if index.exists():
            _rows(index)  # strict and whole after every kill
    assert kvbench(*with_base([], results), cwd=tmp_path).wait(timeout=300) == 0  # a rerun works
    finished, unfinished = run_dirs(results / "runs")
    rows = _rows(index)
    assert {r["run_id"] for r in rows} <= {d.name for d in finished}
    index.unlink()
    assert reindex(index)[0] == len(finished)
    assert sorted(r["run_id"] for r in _rows(index)) == sorted(d.name for d in finished)
    assert len(clean(index)) == len(unfinished) and run_dirs(results / "runs")[1] == []
    for row in _rows(index):
        assert json.loads((results / row["run_dir"] / "summary.json").read_text())["run_id"] == row["run_id"]
