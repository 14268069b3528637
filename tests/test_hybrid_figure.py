"""The mixed-model figure draws from the committed study (results/paper/hybrid) and skips without it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("seaborn")

from paper_figs import common, hybrid_models  # noqa: E402

INDEX = Path(__file__).resolve().parents[1] / "results" / "paper" / "hybrid" / "index.jsonl"


def test_draws_png_and_pdf_from_the_committed_study(tmp_path, capsys):
    index_df, root = common.load(INDEX)
    paths = hybrid_models.draw(index_df, tmp_path, root)
    assert sorted(p.name for p in paths) == ["hybrid_models.pdf", "hybrid_models.png"]
    assert all(p.stat().st_size > 5_000 for p in paths)
    assert "skipped" not in capsys.readouterr().out


def test_skips_an_index_without_the_study(tmp_path, capsys):
    index = tmp_path / "index.jsonl"
    index.write_text(json.dumps({"run_id": "r0", "experiment": "paper-breakdown", "allocator": "paged",
                                 "reserve": None, "block_size": 16, "model": "opt-13b", "workload": "sharegpt"}) + "\n")
    index_df, root = common.load(index)
    assert hybrid_models.draw(index_df, tmp_path, root) == []
    assert "skipped" in capsys.readouterr().out
