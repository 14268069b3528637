"""The run spec: built once per job from the composed config, frozen, handed downstream."""
from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

from kvbench.config.errors import CONF_DIR
from kvbench.config.spec import model_geometry
from kvbench.run.precheck import check_job
from kvbench.run.prepare import prepare, run_spec


def _cfg(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["backend=sim", "model=opt-13b", "gpu=a100-40gb", "workload=synthetic",
                                            f"results_dir={tmp_path}", "logger=none", *overrides])


def test_the_spec_carries_the_workload_as_configured(tmp_path):
    cfg = _cfg(tmp_path, "workload.num_requests=7", "workload.request_rate=2.5", "workload.n=2",
               "workload.max_concurrency=3")
    spec = run_spec(cfg)
    summary = spec.workload
    assert (summary.name, summary.num_requests, summary.request_rate, summary.n, summary.beam_width,
            summary.max_concurrency, summary.duration_s) == ("synthetic", 7, 2.5, 2, 1, 3, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.workload = None  # type: ignore[misc]
    assert spec.geometry == model_geometry(cfg.model)
    assert spec.num_slots * spec.geometry.bytes_per_slot == spec.kv_bytes


def test_the_checks_spec_is_the_runs_and_prepare_keeps_the_one_it_is_handed(tmp_path):
    cfg = _cfg(tmp_path, "workload.num_requests=4")
    spec = check_job(cfg)
    assert spec == run_spec(cfg)  # the same function, the same config: the same spec
    prep = prepare(cfg, spec)
    assert prep.spec is spec and prep.allocator.num_slots == spec.num_slots
    assert prep.executor.params.bytes_per_slot == spec.geometry.bytes_per_slot
