"""scripts/verify_results.py: committed runs rerun on the current code, and a changed one is caught."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "results" / "paper"
spec = importlib.util.spec_from_file_location("verify_results", ROOT / "scripts" / "verify_results.py")
verify_results = importlib.util.module_from_spec(spec)
sys.modules["verify_results"] = verify_results
spec.loader.exec_module(verify_results)

pytestmark = pytest.mark.skipif(not COMMITTED.is_dir(), reason="no committed results")


def _cheap_run(experiment: str) -> Path:
    runs = [p for p in sorted((COMMITTED / "runs" / experiment).glob("*/summary.json"))
            if json.loads(p.read_text())["wall_s"] < 1.0]
    return runs[0]


def test_a_sample_of_committed_runs_reproduces(capsys):
    # one of the cheapest runs of the post-2023 allocators' studies (a 2-3 s simulation)
    assert verify_results.main(["--root", str(COMMITTED / "beyond"), "--sample", "1", "--seed", "3",
                                "--max-wall", "3"]) == 0
    assert "1 of 1 reruns identical" in capsys.readouterr().out


def test_a_changed_committed_number_fails(tmp_path, capsys):
    src = _cheap_run("paper-pressure")
    dst = tmp_path / "runs" / "paper-pressure" / src.parent.name / "summary.json"
    dst.parent.mkdir(parents=True)
    row = json.loads(src.read_text())
    row["mem_token_frac"] *= 1.001
    dst.write_text(json.dumps(row))
    assert verify_results.main(["--root", str(tmp_path), "--sample", "0"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "mem_token_frac" in out and "wall_s" not in out


def test_rebuilt_overrides_tell_the_parallel_and_beam_studies_apart():
    files = verify_results._experiment_files()
    row = {"experiment": "paper-sharing", "allocator_label": "paged", "n": 1, "beam_width": 6, "model": "opt-13b",
           "workload": "alpaca-synthetic"}
    candidates = verify_results.rebuilt_overrides(row, files)
    assert ["experiment=paper-sharing-beam", "allocator=paged", "workload.beam_width=6"] in candidates
    cfgs = [(c, verify_results.compose(c, "results")) for c in candidates]
    matching = [c for c, cfg in cfgs if verify_results._identity_matches(cfg, row | {"gpu_profile": "a100-40gb"})]
    assert matching == [["experiment=paper-sharing-beam", "allocator=paged", "workload.beam_width=6"]]
