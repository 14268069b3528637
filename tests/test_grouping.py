"""The comparison rule: which settings differ among runs (``kvbench.grouping``)."""
from __future__ import annotations

import pandas as pd

from kvbench.grouping import settings_that_vary


def test_seed_identity_and_metrics_never_count_as_settings():
    frame = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 1], "commit": ["x", "y"], "run_dir": ["1", "2"],
                          "allocator": ["paged", "paged"], "request_throughput": [1.0, 2.0]})
    assert settings_that_vary(frame) == []


def test_a_setting_that_differs_is_named_unless_ignored():
    frame = pd.DataFrame({"allocator": ["paged", "buddy"], "request_rate": [1.0, 1.0], "workload": ["a", "b"]})
    assert settings_that_vary(frame) == ["allocator", "workload"]
    assert settings_that_vary(frame, ignore=["allocator"]) == ["workload"]


def test_a_null_is_a_value_of_its_own_and_numbers_compare_by_value():
    assert settings_that_vary(pd.DataFrame({"reserve": [None, "max"]})) == ["reserve"]
    assert settings_that_vary(pd.DataFrame({"reserve": [None, float("nan")]})) == []
    assert settings_that_vary(pd.DataFrame({"block_size": pd.array([16, None], dtype="Int64")})) == ["block_size"]
    assert settings_that_vary(pd.DataFrame({"request_rate": [2, 2.0]}, dtype=object)) == []
