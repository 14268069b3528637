"""kvbench-dashboard builds its workspace without an account or a network."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("wandb_workspaces")

from kvbench import dashboard  # noqa: E402

MEM = ("mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac")


@pytest.fixture(autouse=True)
def no_wandb_api(monkeypatch):
    """Any attempt to reach W&B fails the test."""
    import wandb

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run must not call the W&B API")

    monkeypatch.setattr(wandb, "Api", refuse)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def test_workspace_has_the_comparison_panels():
    workspace = dashboard.build_workspace("me", "kvbench")
    panels = dashboard.describe(workspace)
    by_title = {p["title"]: p for p in panels}

    for m in MEM:  # run means as bars grouped by allocator
        bars = [p for p in panels if p["type"] == "BarPlot" and p["metrics"] == [f"SummaryMetric({m})"]]
        assert len(bars) == 1 and bars[0]["groupby"] == "Config(allocator_label)"
        steps = [p for p in panels if p["type"] == "LinePlot" and p["metrics"] == [f"steps/{m}"]]
        assert len(steps) == 1 and steps[0]["x"] == "step"
    for m in ("mean_batch_size", "request_throughput", "normalized_latency_s"):
        assert any(p["type"] == "BarPlot" and p["metrics"] == [f"SummaryMetric({m})"] for p in panels)
    line = by_title["normalized latency vs request rate"]
    assert line["type"] == "LinePlot" and line["x"] == "by_rate/request_rate"
    assert line["metrics"] == ["by_rate/normalized_latency_s"] and line["groupby"] == "Config(allocator_label)"

    spec = json.loads(dashboard.spec_json(workspace))
    assert spec["entity"] == "me" and spec["project"] == "kvbench"
    # runs grouped by the top-level config key "allocator" (W&B stores it as allocator.value)
    assert spec["spec"]["section"]["runSets"][0]["grouping"] == [{"section": "config", "name": "experiment.value"},
                                                                {"section": "config", "name": "allocator_label.value"}]
    sections = spec["spec"]["section"]["panelBankConfig"]["sections"]
    assert sum(len(s["panels"]) for s in sections) == len(panels)


def test_cli_dry_run_prints_panels_and_json(capsys):
    assert dashboard.main(["--entity", "me", "--project", "kvb"]) == 0
    out = capsys.readouterr().out
    assert "me/kvb" in out and "steps/mem_external_frac" in out and "by_rate/request_rate" in out

    assert dashboard.main(["--json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["project"] == "kvbench"


def test_cli_save_without_entity_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    assert dashboard.main(["--save"]) == 2
    assert "--entity" in capsys.readouterr().err
