"""The rule for comparing runs: which settings differ among a set of runs.

Runs may be averaged or put in one group only when they differ in nothing but the seed.
``settings_that_vary`` names the setting columns that take more than one value among a frame's
rows; a caller refuses to average (or groups by them) when the list is not empty.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

# what a run is called or where it came from: never a setting
IDENTITY_COLUMNS = frozenset({
    "run_id", "run_dir", "experiment", "commit", "tree_clean", "overrides", "nonfinite", "wall_s",
    "granularity",  # derived from the allocator's knobs, which are settings themselves
})

# what a run was given (every other summary column is a measurement)
SETTING_COLUMNS = (
    "allocator", "allocator_label", "reserve", "block_size", "page_bytes", "backend", "device",
    "gpu_profile", "gpu_count", "model", "workload", "request_rate", "num_requests", "kv_slots", "kv_bytes",
    "max_concurrency", "burstiness", "n", "beam_width", "ignore_eos", "prefix_len", "preemption",
    "chunked_prefill", "system", "scheduling", "batching", "baseline", "max_num_batched_tokens", "attention",
    "clock", "overlong", "time_scale", "seed",
)


def _key(value: object) -> str:
    """One comparable text per value; every null the same."""
    try:
        if pd.isna(value):
            return "<null>"
    except (TypeError, ValueError):  # a list or other container
        pass
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))  # 2 and 2.0 are the same setting
    return repr(value)


def settings_that_vary(frame: pd.DataFrame, ignore: Iterable[str] = ()) -> list[str]:
    """The setting columns of ``frame``, other than ``seed``, run identity/provenance columns and
    those in ``ignore``, whose values are not all equal across its rows (a null is a value)."""
    skip = {"seed", *IDENTITY_COLUMNS, *ignore}
    varying = []
    for column in SETTING_COLUMNS:
        if column in skip or column not in frame.columns:
            continue
        if len({_key(v) for v in frame[column].tolist()}) > 1:
            varying.append(column)
    return varying
