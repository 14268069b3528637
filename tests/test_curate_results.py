"""scripts/curate_results.py keeps the newest run of each configuration, a configuration being every
setting the grouping rule reads (any recorded cfg.* leaf), the seeds and the experiment file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _row(run_id: str, eviction: str, seed: int = 0, hits: float = 0.5) -> dict:
    return {"run_id": run_id, "run_dir": f"runs/offload/{run_id}", "experiment": "offload", "allocator": "radix",
            "seed": seed, "prefix_token_hit_rate": hits, "cfg.allocator.eviction": eviction, "cfg.seed": seed,
            "cfg_keys": "k1", "overrides": json.dumps(["experiment=offload-mooncake"])}


def _curate(tmp_path: Path, rows: list[dict]) -> list[str]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    for row in rows:
        (src / row["run_dir"]).mkdir(parents=True)
        (src / row["run_dir"] / "summary.json").write_text(json.dumps(row))
    (src / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    subprocess.run([sys.executable, str(ROOT / "scripts/curate_results.py"), str(src), str(dst)], check=True,
                   cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, capture_output=True)
    return sorted(json.loads(line)["run_id"] for line in (dst / "index.jsonl").read_text().splitlines())


def test_runs_apart_in_a_recorded_leaf_are_both_kept(tmp_path):
    # the hand-kept key had no eviction policy: the arc run replaced the lru one
    assert _curate(tmp_path, [_row("20260101-a", "lru"), _row("20260101-b", "arc")]) == ["20260101-a", "20260101-b"]


def test_a_rerun_of_the_same_settings_replaces_the_older_run(tmp_path):
    rows = [_row("20260101-a", "lru", hits=0.5), _row("20260102-a", "lru", hits=0.4)]
    assert _curate(tmp_path, rows) == ["20260102-a"]


def test_seeds_are_kept_apart(tmp_path):
    rows = [_row("20260101-a", "lru", seed=0), _row("20260101-b", "lru", seed=1)]
    assert _curate(tmp_path, rows) == ["20260101-a", "20260101-b"]
