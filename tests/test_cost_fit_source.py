"""A GPU profile without an operator fit of its own: the run records whose fit timed it
(``cost_fit_source``), warns once, and kvbench-report shows it."""
from __future__ import annotations

import logging

import pandas as pd
import pytest
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.sim.cost_model import cost_fit_source


def _gpu(name: str):
    return OmegaConf.load(CONF_DIR / "gpu" / f"{name}.yaml")


@pytest.mark.parametrize("name, source", [
    ("a10g", "a100-80gb"),  # sets no operator constant: the a100-80gb fit (DEFAULTS)
    ("a100-80gb", "a100-80gb"), ("h100-80gb", "h100-80gb"), ("a100-40gb", "a100-40gb"), ("h200", "h200"),
])
def test_each_shipped_profile_names_its_fit(name, source):
    assert cost_fit_source(_gpu(name)) == source


def test_a_profile_setting_only_some_constants_borrows_the_rest():
    gpu = OmegaConf.merge(_gpu("a10g"), {"name": "mine", "gemm_eff_max": 0.5})
    assert cost_fit_source(gpu) == "a100-80gb"
    full = OmegaConf.merge(_gpu("h100-80gb"), {"name": "mine"})
    assert cost_fit_source(full) == "mine"


def _run(tmp_path, gpu: str) -> dict:
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"gpu={gpu}", "model=opt-125m", "workload.num_requests=4", "progress=false", "logger=none",
            f"results_dir={tmp_path}"])
    return run(cfg, run_dir=tmp_path / gpu)


@pytest.mark.parametrize("gpu, source, warned", [("a10g", "a100-80gb", True), ("h100-80gb", "h100-80gb", False)])
def test_the_run_records_the_fit_and_warns_once_when_borrowed(tmp_path, caplog, gpu, source, warned):
    with caplog.at_level(logging.INFO, logger="kvbench"):
        summary = _run(tmp_path, gpu)
    assert summary["cost_fit_source"] == source
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "operator constants" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert "a100-80gb fit" in warnings[0] and "\n" not in warnings[0]


def test_the_report_shows_each_profile_s_fit():
    from kvbench.tools.report import cost_fit_text, provenance_section

    runs = pd.DataFrame({"run_id": ["20261204-000000-aaaaaaaa", "20261204-000001-bbbbbbbb"],
                         "gpu_profile": ["a10g", "h100-80gb"], "cost_fit_source": ["a100-80gb", "h100-80gb"]})
    assert cost_fit_text(runs) == "a10g: a100-80gb (borrowed: no operator fit of its own), h100-80gb: h100-80gb"
    assert "a10g: a100-80gb (borrowed" in provenance_section(runs, "src", [])
    assert cost_fit_text(runs.drop(columns="cost_fit_source")) == "-"  # runs recorded before the column
