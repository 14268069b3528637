"""Issue 34's done-when on the Mooncake conversation trace (slow: six runs of a 300 s window).

Llama-3-8B (32K context) on one H100-80GB, paged_prefix at block size 16
(``scripts/offload_ceiling.py``): host tiers of 1x, 2x, 4x and 8x the GPU's KV bytes raise the
total token hit rate monotonically from the GPU-only figure toward the trace's reuse
ceiling; a disk tier large enough for the whole window gets within one point of the ceiling.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
_spec = importlib.util.spec_from_file_location(
    "offload_ceiling", Path(__file__).resolve().parents[1] / "scripts" / "offload_ceiling.py")
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)


def test_host_tiers_rise_monotonically_toward_the_ceiling(tmp_path):
    rows = {name: study.run_case(name, overrides, 300.0, tmp_path) for name, overrides in study.CASES.items()}
    ceiling = rows["gpu-only"]["trace_reuse_ceiling"]
    gpu_only = rows["gpu-only"]["prefix_token_hit_rate"]
    totals = [rows[f"host-{m}x"]["tier_hit_rate_total"] for m in (1, 2, 4, 8)]
    assert gpu_only <= totals[0]
    assert all(a <= b for a, b in zip(totals, totals[1:])), totals
    disk = rows["host-1x+disk-100TB"]["tier_hit_rate_total"]
    assert totals[-1] <= disk + 1e-9
    # within a point of the ceiling (measured: 23.40% against 22.48%; above it because requests
    # preempted at this load look their prompts up again, which the ceiling counts once)
    assert abs(disk - ceiling) <= 0.01
    for row in rows.values():
        assert row["trace_reuse_ceiling"] == ceiling  # the same window every time
