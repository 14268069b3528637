"""The bench gate's logic: verdicts, the table, the A/B statistics, the reference commit and the
baseline (no timing thresholds: those are ``make bench``'s job)."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.benchmarks import gate


def test_a_ratio_above_tolerance_regresses_and_drift_below_passes():
    expected = {"allocator": {"paged-16": 1.0, "buddy-max": 1.1}}
    rows, ok = gate.compare({"allocator": {"paged-16": 1.3, "buddy-max": 1.1 * 1.15}}, expected)
    assert not ok
    assert {r["name"]: r["verdict"] for r in rows} == {"paged-16": "REGRESSED", "buddy-max": "ok"}
    assert rows[0]["change"] == pytest.approx(0.3)
    assert gate.compare({"allocator": {"paged-16": 0.7}}, expected)[1]  # faster passes
    # no expected ratio, or not measured at the reference: new, passes
    rows, ok = gate.compare({"kernel": {"paged-attention": 1.0}, "allocator": {"paged-16": None}}, expected)
    assert ok and [r["verdict"] for r in rows] == ["new", "new"]


def test_table_names_every_row_and_its_verdict():
    rows, _ = gate.compare({"allocator": {"paged-16": 1.3}, "sim": {"sim-paged": None}},
                           {"allocator": {"paged-16": 1.0}})
    table = gate.format_rows(rows).splitlines()
    assert table[0].split()[:6] == ["group", "measurement", "expected", "now", "change", "verdict"]
    assert "+20%" in table[0]
    assert table[1].split() == ["allocator", "paged-16", "1.000", "1.300", "+30.0%", "REGRESSED"]
    assert table[2].split() == ["sim", "sim-paged", "-", "-", "-", "new"]


def test_ratios_pair_round_k_with_round_k_then_take_medians_over_pairs():
    # round k of both sides does the same work: the ratio pairs them before the median
    cur = [{"a": 2.0, "b": 1.0}, {"a": 4.0, "b": 1.0}, {"a": 6.6, "b": 1.0}]
    ref = [{"a": 1.0}, {"a": 2.0}, {"a": 3.0}]
    assert gate.round_ratios(cur, ref) == {"a": pytest.approx(2.0), "b": None}
    pairs = [{"g": {"a": 1.0, "b": None}}, {"g": {"a": 1.3, "b": 2.0}}, {"g": {"a": 0.9, "b": None}}]
    ratios = gate.per_pair(pairs)
    assert ratios == {"g": {"a": [1.0, 1.3, 0.9], "b": [2.0]}}
    assert gate.medians(ratios) == {"g": {"a": 1.0, "b": 2.0}}
    assert gate.medians({"g": {"c": []}}) == {"g": {"c": None}}


def test_injected_slowdown_stretches_the_measurement(monkeypatch):
    monkeypatch.setenv("KVBENCH_BENCH_SLOWDOWN", "paged-16:1.5 paged-attention:2")
    assert gate._slowdowns() == {"paged-16": 1.5, "paged-attention": 2.0}

    def busy() -> None:  # CPU work: the gate times CPU time, which a sleep does not use
        end = time.process_time() + 0.02
        while time.process_time() < end:
            pass

    plain = gate._timed(busy)
    slowed = gate._timed(busy, 2.0)
    assert plain >= 0.02 and slowed > 1.6 * plain


def test_a_reference_commit_missing_from_the_repository_exits_2_with_one_line(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"ref": "0123456789" * 4, "expected": {"allocator": {"paged-16": 1.0}}}))
    assert gate.main(["--baseline", str(baseline)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "0123456789" * 4 in err and "not in this repository" in err
    assert gate.main(["--baseline", str(tmp_path / "none.json")]) == 2  # no baseline at all
    assert "bench-update" in capsys.readouterr().err


def test_update_refuses_a_tree_with_uncommitted_changes_to_measured_code(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "kvbench").mkdir()
    (tmp_path / "kvbench" / "x.py").write_text("x = 1\n")
    (tmp_path / "docs.md").write_text("notes\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    assert gate.dirty_paths(tmp_path) == []
    (tmp_path / "docs.md").write_text("other notes\n")  # outside the measured code: fine
    (tmp_path / "kvbench" / "new.py").write_text("")  # untracked: fine
    assert gate.dirty_paths(tmp_path) == []
    (tmp_path / "kvbench" / "x.py").write_text("x = 2\n")
    assert gate.dirty_paths(tmp_path) == ["kvbench/x.py"]
    assert gate.resolve_ref("HEAD", tmp_path) == git("rev-parse", "HEAD").strip()
    with pytest.raises(gate.GateError, match="not in this repository"):
        gate.resolve_ref("f" * 40, tmp_path)


def test_child_refuses_code_from_another_tree(tmp_path):
    with pytest.raises(SystemExit, match="not from the tree under test"):
        gate._check_tree(tmp_path)


def test_committed_baseline_names_a_commit_and_covers_every_measurement():
    baseline = json.loads(gate.BASELINE.read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", baseline["ref"])
    expected = baseline["expected"]
    from tests.benchmarks.test_bench_allocators import STRATEGIES

    assert set(expected["allocator"]) == {p.id for p in STRATEGIES}
    assert set(expected["kernel"]) == {"paged-attention"}
    from tests.benchmarks.test_bench_engine import SIM_GATE_ALLOCATORS

    assert set(expected["sim"]) == {f"sim-{name}" for name in SIM_GATE_ALLOCATORS}
    assert all(v > 0 for group in expected.values() for v in group.values())


@pytest.mark.slow  # one pair of processes, a few rounds (about 15 s); no timing asserted
def test_one_pair_measures_every_measurement_on_both_trees():
    ratios = gate.run_pair(gate.ROOT, seed=1, scale=0.05, current_first=True)
    assert {g: set(n) for g, n in ratios.items()} == {g: set(n) for g, n in gate.measurement_names().items()}
    assert all(r is not None and r > 0 for names in ratios.values() for r in names.values())
