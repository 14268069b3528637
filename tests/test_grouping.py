"""kvbench.results.grouping: the one rule for when runs may be averaged (settings_that_vary and friends)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from kvbench.results.grouping import GroupingError, check_like, numeric_metric, settings_that_vary


def _frame(**columns) -> pd.DataFrame:
    base = {"run_id": ["a", "b"], "seed": [0, 1], "allocator": ["paged", "paged"], "request_throughput": [1.0, 2.0],
            "commit": ["x", "y"], "wall_s": [1.0, 9.0], "kv_slots": [10, 11]}
    return pd.DataFrame(base | columns)


def test_seed_identity_provenance_and_metrics_never_vary():
    assert settings_that_vary(_frame()) == []


@pytest.mark.parametrize("values", [[None, 4], [4, None], [4, 8], [True, False], ["a", None], [16, 32.0]])
def test_a_null_against_a_value_varies_and_so_do_unequal_values(values):
    assert settings_that_vary(_frame(max_concurrency=values)) == ["max_concurrency"]


@pytest.mark.parametrize("values", [[None, None], [4, 4.0], [float("nan"), None], ["x", "x"]])
def test_equal_values_and_nulls_of_any_kind_do_not_vary(values):
    assert settings_that_vary(_frame(max_concurrency=values)) == []


def test_an_unknown_column_is_a_setting_unless_named_like_a_measurement():
    frame = _frame(new_knob=["a", "b"], new_latency_ms=[1.0, 2.0], goodput_frac=[0.1, 0.2])
    assert settings_that_vary(frame) == ["new_knob"]
    assert settings_that_vary(frame, ignore=["new_knob"]) == []


def test_kv_bytes_is_compared_as_the_requested_budget_when_overrides_were_recorded():
    asked = json.dumps(["engine.kv_cache_bytes=1000000"])
    same = _frame(kv_bytes=[999_936, 983_040], overrides=[asked, asked])
    assert settings_that_vary(same) == []
    other = _frame(kv_bytes=[999_936, 999_936], overrides=[asked, json.dumps(["engine.kv_cache_bytes=2e6"])])
    assert settings_that_vary(other) == ["kv_bytes"]
    assert settings_that_vary(_frame(kv_bytes=[999_936, 983_040])) == ["kv_bytes"]  # no overrides: as recorded


def test_a_non_numeric_metric_is_an_error_naming_the_run():
    with pytest.raises(GroupingError, match="run b"):
        numeric_metric(_frame(request_throughput=[1.0, "fast"]), "request_throughput")
    assert numeric_metric(_frame(request_throughput=[1.0, None]), "request_throughput").isna().tolist() == [False, True]


def test_check_like_refuses_averaging_unlike_runs():
    check_like(_frame(), ["allocator"])
    with pytest.raises(GroupingError, match="block_size"):
        check_like(_frame(block_size=[16, 32]), ["allocator"])


# The contract kvbench-plot relies on
def test_contract_seed_identity_and_metrics_never_count_as_settings():
    frame = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 1], "commit": ["x", "y"], "run_dir": ["1", "2"],
                          "allocator": ["paged", "paged"], "request_throughput": [1.0, 2.0]})
    assert settings_that_vary(frame) == []


def test_contract_a_setting_that_differs_is_named_unless_ignored():
    frame = pd.DataFrame({"allocator": ["paged", "buddy"], "request_rate": [1.0, 1.0], "workload": ["a", "b"]})
    assert settings_that_vary(frame) == ["allocator", "workload"]
    assert settings_that_vary(frame, ignore=["allocator"]) == ["workload"]


def test_contract_a_null_is_a_value_of_its_own_and_numbers_compare_by_value():
    assert settings_that_vary(pd.DataFrame({"reserve": [None, "max"]})) == ["reserve"]
    assert settings_that_vary(pd.DataFrame({"reserve": [None, float("nan")]})) == []
    assert settings_that_vary(pd.DataFrame({"block_size": pd.array([16, None], dtype="Int64")})) == ["block_size"]
    assert settings_that_vary(pd.DataFrame({"request_rate": [2, 2.0]}, dtype=object)) == []


@pytest.mark.parametrize("overrides", [
    # priority classes, an aging bound and recompute preemptions: the policy and keep-up columns
    ["workload=sharegpt", "workload.num_requests=60", "workload.request_rate=20", "+workload.priority_shares=[0.2,0.8]",
     "engine.policy=priority", "engine.max_wait_s=5", "engine.kv_cache_bytes=1e9", "model=llama-3-8b", "gpu=h100-80gb"],
    # a host tier behind a prefix cache: the tier columns
    ["allocator=paged_prefix", "offload=host", "workload=multiturn", "workload.num_requests=30",
     "engine.kv_cache_bytes=1e9"],
])
def test_every_measured_column_of_a_run_is_a_measurement(overrides, tmp_path):
    """Two runs that differ only in the seed differ in no setting: a new summary column that is
    measured must be named like one or listed (METRIC_COLUMNS, METRIC_PATTERN), or a figure
    refuses to average the seeds of a study."""
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR
    from kvbench.run.lifecycle import run

    rows = []
    for seed in (0, 1):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=["backend=sim", "logger=none", "progress=false",
                                                           f"results_dir={tmp_path}", f"seed={seed}", f"workload.seed={seed}",
                                                           *overrides])
        rows.append(run(cfg))
    frame = pd.DataFrame(rows)
    measured = [c for c in frame.columns if c != "seed" and frame[c].astype(str).nunique() > 1]
    assert measured  # the seeds did change results
    assert settings_that_vary(frame) == []
