"""When runs may be averaged: the one rule every reader that aggregates follows.

Runs may be averaged only when every setting except the seed is equal. A *setting* is any column
that describes what a run was given (allocator and its knobs, model, GPU profile and count,
workload and its knobs, engine and system knobs, ...); everything measured, the run's identity
and its provenance are not settings. The rule is safe by default: a column this module does not
know is a setting unless its name marks a measurement (``*_ms``, ``*_frac``, ...), so a knob added
later splits groups instead of being averaged over.

A null is a value: a setting that is null for some runs and set for others varies (a row of an
older schema that lacks a knob is not like a row that records it). ``kv_bytes`` is compared as the
KV budget the run *requested* (its experiment file and ``engine.kv_cache_bytes`` in its recorded
overrides), not the pool its allocator rounded it to (each rounds to its own unit), and
``num_requests`` as the count or duration asked for (a stream bounded by ``duration_s`` draws a
count that varies with the seed), when the row recorded its overrides; else as recorded.

Every run records each leaf of its resolved config as a ``cfg.<key>`` column and the set of keys
it recorded as ``cfg_keys`` (``kvbench.results.settings``): each is a setting (a knob added to
``conf/`` splits groups with no change here), but for the recorded seeds (``cfg.seed``,
``cfg.workload.seed``), the repeat axis. Rows that record other keys differ in ``cfg_keys``; where
a frame holds that column, a row without a record (an older schema) is a group of its own.
``distinct_settings`` leaves out the recorded leaves that split nothing further than the columns
beside them (``cfg.allocator.name`` beside ``allocator``), for tables and titles.
"""
from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Sequence

import pandas as pd

from kvbench.results import settings as recorded

SEED_COLUMN = "seed"
# the seeds a run used besides the run's own (``workload_seed``: kvbench.config.seeds.seeds_used)
SEED_SUFFIX = "_seed"
# who a run is and where it came from: never a setting
RUN_IDENTITY_COLUMNS: tuple[str, ...] = ("run_id", "run_dir", "commit", "tree_clean", "overrides", "nonfinite",
                                         "wall_s")
# the pool in slots follows from the budget (kv_bytes) and the allocator's unit
DERIVED_POOL_COLUMNS: tuple[str, ...] = ("kv_slots",)

# measured values (the results schema's throughput, latency, batching, memory, pressure, outcome
# columns and the later additions); a column named like one of METRIC_SUFFIXES is measured too
METRIC_COLUMNS: frozenset[str] = frozenset((
    "duration_s", "request_throughput", "output_token_throughput", "total_token_throughput",
    "mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s", "normalized_latency_s",
    "mean_batch_size", "max_batch_size", "mean_running_requests",
    "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac",
    "num_preemptions", "prefix_hit_rate", "sharing_saving_frac", "num_finished", "num_rejected",
    "completed", "failed", "total_input_tokens", "total_output_tokens", "input_throughput", "output_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests", "concurrency", "request_goodput", "goodput",
    "mean_prompt_len", "median_prompt_len", "mean_output_len", "median_output_len",
    "num_clipped", "workload_pool", "arrival_cv", "trace_reuse_ceiling", "num_refused_overlong",
    "num_steps", "swap_out_slots", "swap_in_slots", "mean_step_s", "page_maps", "page_unmaps", "evictions",
    "prefix_token_hit_rate", "window_freed_slots", "prefix_requests",
    # scheduling policies and the keep-up test (issues 36, 37)
    "max_queue_wait_s", "num_waited_over_bound", "jain_fairness_normalized_latency", "preempt_lost_tokens",
    "preempt_lost_tokens_per_preempted", "ttft_growth",
))  # fmt: skip
METRIC_SUFFIXES: tuple[str, ...] = ("_ms", "_frac", "_throughput", "_per_token", "_per_s", "_hit_rate")
# measured per priority class (prio0_p99_ttft_s), per offload tier (tier_bytes_gpu_to_host) and for
# re-admissions after a preemption (preempted_hits); the tiers' settings are the offload_* columns
METRIC_PATTERN = re.compile(r"^(prio\d+_|tier_|preempted_)")
# named like a measurement, yet what the run was given
SETTING_OVERRIDES: frozenset[str] = frozenset(("request_rate",))


class GroupingError(ValueError):
    """Runs that cannot be aggregated as asked (a metric that is not a number); one line."""


def is_setting(column: str) -> bool:
    """Whether ``column`` describes what a run was given (seed included)."""
    if column in RUN_IDENTITY_COLUMNS or column in DERIVED_POOL_COLUMNS:
        return False
    if column in SETTING_OVERRIDES or recorded.is_recorded(column):
        return True
    return column not in METRIC_COLUMNS and not column.endswith(METRIC_SUFFIXES) and not METRIC_PATTERN.match(column)


def is_seed(column: str) -> bool:
    """Whether ``column`` is a seed the run used: the repeat axis, never averaged over as a setting."""
    return column == SEED_COLUMN or column.endswith(SEED_SUFFIX) or recorded.is_seed(column)


def setting_columns(frame: pd.DataFrame, ignore: Iterable[str] = ()) -> list[str]:
    """The frame's setting columns other than the seeds and those in ``ignore``, in frame order."""
    skip = set(ignore)
    return [c for c in frame.columns if c not in skip and not is_seed(str(c)) and is_setting(str(c))]


def value_key(value: object) -> object:
    """A hashable key under which equal setting values meet: every null is one key, 4 and 4.0 are
    one key, True is not 1, a nested value (list, dict) is compared by its JSON text."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()  # numpy scalar
        except (ValueError, TypeError):
            pass
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return None if math.isnan(number) else ("num", number)
    if isinstance(value, str):
        return ("str", value)
    try:
        return ("json", json.dumps(value, sort_keys=True, default=str))
    except (TypeError, ValueError):
        return ("repr", repr(value))


# Settings recorded as what a run *got*, compared as what it *asked for* when the row recorded its
# overrides: the KV pool (each allocator rounds the budget to its own unit) and the request count
# (a stream bounded by duration_s draws a count that varies with the seed). What was asked for is
# the experiment file chosen plus the overrides of these keys (None: the file's or profile's default).
REQUESTED_BY: dict[str, tuple[str, ...]] = {
    "kv_bytes": ("engine.kv_cache_bytes", "engine.gpu_memory_utilization"),
    "num_requests": ("workload.num_requests", "workload.duration_s"),
}
_OVERRIDE = re.compile(r"^[+~]*([\w.@/-]+)=(.*)$")


def _overrides(recorded: object) -> dict[str, str] | None:
    """A row's recorded Hydra overrides as key -> value, or None when it recorded none (or garbage)."""
    if not isinstance(recorded, str) or not recorded:
        return None
    try:
        items = json.loads(recorded)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    out = {}
    for item in items:
        if match := _OVERRIDE.match(str(item)):
            out[match.group(1)] = match.group(2).strip()
    return out


def _number_or_text(text: str | None) -> object:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def requested_values(frame: pd.DataFrame, column: str) -> pd.Series:
    """Per row, what the run asked for in a REQUESTED_BY column, as a comparable key: the experiment
    file and the overrides of the keys that set it; a row without recorded overrides: its value."""
    recorded = frame["overrides"].tolist() if "overrides" in frame.columns else [None] * len(frame)
    values = frame[column].tolist() if column in frame.columns else [None] * len(frame)
    keys = []
    for value, text in zip(values, recorded):
        overrides = _overrides(text)
        if overrides is None:
            keys.append(value_key(value))
        else:
            asked = tuple(_number_or_text(overrides.get(k)) for k in REQUESTED_BY[column])
            keys.append(("requested", overrides.get("experiment"), asked))
    return pd.Series(keys, index=frame.index, dtype=object)


def experiment_file(recorded: object) -> str | None:
    """The experiment file a row's recorded overrides name (``experiment=...``), or None."""
    return (_overrides(recorded) or {}).get("experiment")


def experiment_files(frame: pd.DataFrame) -> pd.Series:
    """Per row, ``experiment_file`` of its recorded overrides."""
    recorded = frame["overrides"].tolist() if "overrides" in frame.columns else [None] * len(frame)
    return pd.Series([experiment_file(text) for text in recorded], index=frame.index, dtype=object)


def setting_keys(frame: pd.DataFrame, column: str) -> pd.Series:
    """The comparable key of each row's value of a setting column (REQUESTED_BY: what was asked for;
    ``cfg_keys``: a row without a record is unlike every other row)."""
    if column in REQUESTED_BY:
        return requested_values(frame, column)
    keys = [value_key(v) for v in frame[column].tolist()]
    if column == recorded.KEYS_COLUMN:
        keys = [("unrecorded", label) if key is None else key for key, label in zip(keys, frame.index)]
    return pd.Series(keys, index=frame.index, dtype=object)


def settings_that_vary(frame: pd.DataFrame, ignore: Iterable[str] = ()) -> list[str]:
    """The names of the setting columns, other than ``seed``, the run-identity/provenance columns
    and those in ``ignore``, whose values are not all equal across the rows (nulls count as a value:
    null in one row and 4 in another varies). ``kv_bytes`` and ``num_requests`` vary when what the
    runs asked for does (REQUESTED_BY)."""
    if len(frame) < 2:
        return []
    return [c for c in setting_columns(frame, ignore) if len(set(setting_keys(frame, c))) > 1]


def distinct_settings(frame: pd.DataFrame, columns: Sequence[str], given: Sequence[str] = ()) -> list[str]:
    """``columns`` in order, less each recorded leaf (``cfg.*``, ``cfg_keys``) that splits the rows no
    further than ``given``, the other columns and the leaves kept before it: rows split by the result
    split as by all of ``columns``, without ``cfg.model.name`` repeating ``model``."""
    plain = [c for c in columns if not _is_record(c)]
    keys = list(group_keys(frame, [*given, *plain]))
    count = len(set(keys))
    kept = set(plain)
    for column in columns:
        if column in kept:
            continue
        finer = [(*key, part) for key, part in zip(keys, setting_keys(frame, column))]
        if len(set(finer)) > count:
            keys, count = finer, len(set(finer))
            kept.add(column)
    return [c for c in columns if c in kept]


def _is_record(column: str) -> bool:
    return recorded.is_recorded(column) or column == recorded.KEYS_COLUMN


def group_keys(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """One hashable key per row from the given setting columns (nulls and budgets as above)."""
    if not columns:
        return pd.Series([()] * len(frame), index=frame.index, dtype=object)
    parts = [setting_keys(frame, c).tolist() for c in columns]
    return pd.Series(list(zip(*parts)), index=frame.index, dtype=object)


def numeric_metric(frame: pd.DataFrame, metric: str) -> pd.Series:
    """A metric column as floats (null stays NaN); GroupingError naming the run for any value that
    is not a number (a string, a list), never dropped in silence."""
    out = []
    ids = frame["run_id"].tolist() if "run_id" in frame.columns else [None] * len(frame)
    for run_id, value in zip(ids, frame[metric].tolist()):
        key = value_key(value)
        if key is None:
            out.append(math.nan)
        elif key[0] == "num":
            out.append(key[1])
        else:
            who = f"run {run_id}" if run_id is not None else "a run"
            raise GroupingError(f"metric {metric}: {who} has {value!r}, not a number (cannot average or compare it)")
    return pd.Series(out, index=frame.index, dtype=float)


def split(frame: pd.DataFrame, columns: Sequence[str]) -> list[pd.DataFrame]:
    """The rows per distinct key of ``columns`` (nulls one value), in order of first appearance."""
    positions: dict[object, list[int]] = {}
    for i, key in enumerate(group_keys(frame, list(columns))):
        positions.setdefault(key, []).append(i)
    return [frame.iloc[rows] for rows in positions.values()]


def check_like(frame: pd.DataFrame, keys: Sequence[str], what: str = "runs averaged") -> None:
    """GroupingError unless, within every group of ``keys``, no setting but the seed varies."""
    if frame.empty:
        return
    for part in split(frame, keys):
        varying = settings_that_vary(part, ignore=keys)
        if varying:
            first = part.iloc[0]
            where = ", ".join(f"{k}={first[k]}" for k in keys) or "all runs"
            raise GroupingError(f"{what} ({where}) differ in {', '.join(varying)}: not averaged; "
                                "select one value or group by it")


def spread(values: pd.Series) -> float:
    """The sample standard deviation of the present values (NaN for fewer than two)."""
    present = values.dropna()
    return float(present.std()) if len(present) > 1 else math.nan
