"""Per-step rows, per-request rows and the run's summary metrics (the design's definitions).

The serving latency and throughput statistics (vLLM's names and definitions) come from
``kvbench.metrics``; this module adds the design's batching, memory and outcome columns.
"""
from __future__ import annotations

import math
from array import array
from itertools import chain

import numpy as np
import pandas as pd

from allocators.base import MemoryUsage
from kvbench.batch import BatchCounts, StepBatch, StepResult
from kvbench.engine.keepup import keep_up_columns
from kvbench.engine.sequence import Group, GroupStatus
from kvbench.layer_groups import KINDS
from kvbench.metrics import DEFAULT_PERCENTILES, request_itls, serving_metrics

MEM_KEYS = ("mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac")
# per layer group of a mixed model: bytes held in its blocks and bytes its layers still read
GROUP_MEM_KEYS = tuple(f"mem_{kind}{part}_frac" for kind in KINDS for part in ("", "_needed")) + ("mem_needed_frac",)
TIMING_KEYS = ("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s", "schedule_s")


STEP_COLUMNS = (
    "step", "time_s", "step_s", "batch_size", "num_seqs", "num_tokens", "num_prefill_tokens",
    "num_running", "num_waiting", "num_swapped", "num_preemptions", *MEM_KEYS, "mem_cached_frac",
    "logical_slots", "token_slots", "logical_blocks", "physical_blocks", "copy_slots",
    *TIMING_KEYS[:-1], "schedule_s", "running_requests",
)


def _row(index, start_s, duration_s, num_requests, num_seqs, num_tokens, prefill_tokens, num_running, num_waiting,
         num_swapped, num_preemptions, usage: MemoryUsage, logical_slots, blocks, copy_slots,
         attention_s, forward_s, sampling_s, copy_s, swap_s, schedule_s, running_requests) -> tuple:
    """One step's values in the order of ``STEP_COLUMNS``."""
    nan = math.nan
    total = usage.total
    return (index, start_s, duration_s, num_requests, num_seqs, num_tokens, prefill_tokens, num_running, num_waiting,
            num_swapped, num_preemptions,
            usage.token / total, usage.reserved / total, usage.internal / total, usage.external / total,
            nan if usage.cached is None else usage.cached / total,
            logical_slots,
            usage.token if usage.token_slots is None else usage.token_slots,
            blocks[0] if blocks else nan,  # NaN: no shareable blocks
            blocks[1] if blocks else nan,
            copy_slots, attention_s, forward_s, sampling_s, copy_s, swap_s, schedule_s, running_requests)


def _column(general: tuple, general_at: np.ndarray, runs: RunColumn, total: int) -> np.ndarray | list:
    """One step column, the general steps' values at ``general_at`` and the runs' everywhere
    else (in order), typed as pandas would infer it from the values: int64 where all are Python
    ints, float64 where all are Python ints or floats (NaN included), else a list for pandas to
    infer. numpy builds the first two far faster than pandas guesses them."""
    run_values, run_types = runs.values()
    types = set(map(type, general)) | run_types
    dtype = np.int64 if types <= _INT else np.float64 if types <= _INT_OR_FLOAT else object
    try:
        return _typed_column(general, general_at, run_values, total, dtype)
    except OverflowError:  # an int past 64 bits: pandas reads the values itself
        return _typed_column(general, general_at, run_values, total, object)


def _typed_column(general, general_at, run_values, total, dtype) -> np.ndarray | list:
    if run_values is None:
        column = np.array(general, dtype=dtype)
    elif not general:
        column = np.array(run_values, dtype=dtype)
    else:
        column = np.empty(total, dtype=dtype)
        in_run = np.ones(total, dtype=bool)
        in_run[general_at] = False
        column[general_at] = np.array(general, dtype=dtype)
        column[in_run] = run_values if dtype is not object else np.array(run_values, dtype=object)
    return column if dtype is not object else column.tolist()


_INT, _INT_OR_FLOAT = {int}, {int, float}


class RunColumn:
    """A step column's values from decode runs: each run's list, flattened once at the end into
    64-bit ints where every value is an int (a bool is one), else into doubles where every one
    is an int or a float (an int joins them exactly, as pandas would cast it; one past 64 bits
    would be rounded, and no step column holds one), else a list."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: list[list] = []

    def append(self, values: list) -> None:
        self._runs.append(values)

    def values(self) -> tuple[np.ndarray | list | None, set]:
        """The values in order (None: no run) and the set of their types."""
        if not self._runs:
            return None, set()
        try:
            return np.frombuffer(array("q", chain.from_iterable(self._runs)), dtype=np.int64), _INT
        except OverflowError:  # an int past 64 bits: pandas reads the values itself
            flat = list(chain.from_iterable(self._runs))
            return flat, set(map(type, flat))
        except TypeError:
            pass
        try:
            return np.frombuffer(array("d", chain.from_iterable(self._runs)), dtype=np.float64), _INT_OR_FLOAT
        except (TypeError, OverflowError):
            flat = list(chain.from_iterable(self._runs))
            return flat, set(map(type, flat))


class Recorder:
    """Step log: one tuple of the ``STEP_COLUMNS`` per general step (one append keeps the hot
    loop cheap), a decode run's steps as a list per column, turned into columns once at the end."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._rows_at: list[int] = []  # each general step's row in the log
        self._runs = [RunColumn() for _ in STEP_COLUMNS]  # per column, the runs' values
        self._num_steps = 0
        self._groups: list[tuple] = []  # mixed models only: each step's (kind, held, needed) per group
        self._tiers: list[dict[str, int]] = []  # offload tiers only: each step's tier bytes

    def step(
        self,
        *,
        index: int,
        start_s: float,
        batch: StepBatch,
        result: StepResult,
        usage: MemoryUsage,
        logical_slots: int,
        blocks: tuple[int, int] | None = None,
        num_running: int,
        num_waiting: int,
        num_swapped: int,
        num_preemptions: int,
        schedule_s: float,
        running_requests: int | None = None,
        tiers: dict[str, int] | None = None,
    ) -> None:
        chunks = batch.chunks
        counts = batch.counts
        if counts is None:
            counts = BatchCounts()
            counts.add(chunks, batch.block_size)
            counts.num_requests = len({c.request_id for c in chunks})
        timings = result.timings
        nan = math.nan
        if usage.groups is not None:  # mixed models only: no new columns for the others
            self._groups.append(tuple(usage.groups))
        self._rows_at.append(self._num_steps)
        self._num_steps += 1
        self._rows.append(_row(
            index, start_s, result.duration_s, counts.num_requests, len(chunks), counts.num_tokens,
            counts.prefill_tokens, num_running, num_waiting, num_swapped, num_preemptions, usage,
            logical_slots, blocks, sum(op.length for op in batch.copy_ops) if batch.copy_ops else 0,
            timings.get("attention_s", nan), timings.get("forward_s", nan), timings.get("sampling_s", nan),
            timings.get("copy_s", nan), timings.get("swap_s", nan),
            schedule_s, num_running if running_requests is None else running_requests))
        if tiers is not None:  # offload tiers on only: bytes held after the step, moved in it
            self._tiers.append(tiers)

    def decode_run(self, *, first_index: int, starts: list[float], times: dict[str, list[float]], num_seqs: int,
                   pairs: list[int], books: tuple, num_running: list[int], num_waiting: list[int],
                   num_preemptions: list[int], schedule_s: float) -> None:
        """The rows ``step`` logs, for each step of a decode run (``kvbench.engine.decode_run``):
        ``num_seqs`` one-token sampling chunks (context ``pairs[j]``), no copy or swap; ``books``
        the allocator's (token, reserved, internal, external, blocks, cached) of each step. The
        same values as ``_row``'s, zipped into rows at once."""
        token, reserved, internal, external, blocks, cached = books
        k = len(starts)
        nan = math.nan
        if cached is None:
            totals = [t + r + i + e for t, r, i, e in zip(token, reserved, internal, external)]
            cached_frac = [nan] * k
        else:
            totals = [t + r + i + e + c for t, r, i, e, c in zip(token, reserved, internal, external, cached)]
            cached_frac = [c / total for c, total in zip(cached, totals)]
        if blocks is None:
            per_table = distinct = [nan] * k
        else:
            per_table, distinct = [b[0] for b in blocks[:k]], [b[1] for b in blocks[:k]]
        seqs, zeros = [num_seqs] * k, [0] * k
        values = (
            list(range(first_index, first_index + k)), starts, times["duration_s"], seqs, seqs, seqs, zeros,
            num_running, num_waiting, zeros, num_preemptions,
            [t / total for t, total in zip(token, totals)], [r / total for r, total in zip(reserved, totals)],
            [i / total for i, total in zip(internal, totals)], [e / total for e, total in zip(external, totals)],
            cached_frac, pairs[:k], token, per_table, distinct, zeros, times["attention_s"], times["forward_s"],
            times["sampling_s"], times["copy_s"], times["swap_s"], [schedule_s] * k, seqs)
        for column, run_values in zip(self._runs, values):
            column.append(run_values)
        self._num_steps += k

    def steps_frame(self) -> pd.DataFrame:
        if not self._num_steps:
            return pd.DataFrame({})
        total, at = self._num_steps, np.array(self._rows_at, dtype=np.int64)
        general = list(zip(*self._rows)) if self._rows else [()] * len(STEP_COLUMNS)
        columns = {name: _column(values, at, runs, total)
                   for name, values, runs in zip(STEP_COLUMNS, general, self._runs)}
        if self._groups:  # the per-group columns sit after token_slots, as a step's usage lists them
            group_columns: dict[str, list[float]] = {}
            for step_groups in self._groups:
                for kind, held, needed in step_groups:
                    group_columns.setdefault(f"mem_{kind}_frac", []).append(held)
                    group_columns.setdefault(f"mem_{kind}_needed_frac", []).append(needed)
            at = STEP_COLUMNS.index("token_slots") + 1
            names = [*STEP_COLUMNS[:at], *group_columns, *STEP_COLUMNS[at:]]
            columns = {name: columns[name] if name in columns else group_columns[name] for name in names}
        if self._tiers:  # after every other column
            for key in self._tiers[0]:
                columns[key] = [row[key] for row in self._tiers]
        return pd.DataFrame(columns)


def group_memory(steps: pd.DataFrame, weights: np.ndarray | None) -> dict[str, float | None]:
    """Time-weighted means of the per-group memory columns (``GROUP_MEM_KEYS``); None where the
    run's model has no such group (every one on a uniform model). ``mem_needed_frac``: the pool's
    bytes that some layer still reads, over all groups (Jenga's memory utilization)."""
    out: dict[str, float | None] = dict.fromkeys(GROUP_MEM_KEYS)
    if weights is None:
        return out
    needed = []
    for key in GROUP_MEM_KEYS[:-1]:
        if key in steps:
            out[key] = float(np.average(steps[key].to_numpy(), weights=weights))
            if key.endswith("_needed_frac"):
                needed.append(out[key])
    out["mem_needed_frac"] = math.fsum(needed) if needed else None
    return out


def sample_token_times(group: Group) -> list[np.ndarray]:
    """Emission times of each sample's output tokens, in the order of the engine's outputs."""
    seqs = sorted(group.seqs, key=lambda s: (-s.cum_logprob, s.sample_index)) if group.is_beam \
        else sorted(group.seqs + group.stopped_seqs, key=lambda s: s.sample_index)
    return [np.array(s.token_times, dtype=float) for s in seqs]


def requests_frame(groups: list[Group]) -> pd.DataFrame:
    rows = []
    streams = []  # each request's token_times (one array per sample)
    for g in sorted(groups, key=lambda g: g.request_id):
        r = g.request
        finished = g.status is GroupStatus.FINISHED
        e2e = g.finish_s - r.arrival_s if finished else math.nan
        ttft = g.first_token_s - r.arrival_s if g.first_token_s is not None else math.nan
        generated = g.generated_len if finished else r.output_len  # < output_len only for an EOS stop
        tpot = (e2e - ttft) / (generated - 1) if finished and generated > 1 else math.nan
        token_times = sample_token_times(g)
        streams.append(token_times)
        rows.append({
            "request_id": r.request_id,
            "status": g.status.value,
            "reason": g.reject_reason or None,
            "arrival_s": r.arrival_s,
            "first_token_s": g.first_token_s,
            "finish_s": g.finish_s,
            "prompt_len": r.prompt_len,
            "output_len": r.output_len,
            "generated_len": generated if finished else None,  # the longest sample's tokens
            "generated_tokens": g.generated_tokens if finished else None,  # over the returned samples
            "n": r.n,
            "beam_width": r.beam_width,
            "num_preemptions": g.num_preemptions,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "normalized_latency_s": e2e / generated if finished else math.nan,
            "max_itl_s": None,  # the longest stall: below, for all requests at once
            "token_times_s": token_times,  # per sample (best beam first): when each output token was emitted
            "priority": r.priority,  # its scheduling class; None where the workload gives none
            "queue_wait_s": g.queue_wait_s,  # seconds queued (waiting or swapped), over all its stays
            "lost_tokens": g.lost_tokens,  # computed tokens its preemptions by recompute discarded
        })
    for row, longest in zip(rows, longest_gaps(streams)):
        row["max_itl_s"] = longest
    return pd.DataFrame(rows)


def longest_gaps(streams: list[list[np.ndarray]]) -> list[float]:
    """Each request's longest inter-token gap over its samples' token times (NaN without one):
    every gap of every request from one difference of all the times, those across two samples
    dropped."""
    samples = [t for request in streams for t in request]
    lengths = np.array([len(t) for t in samples], dtype=np.int64)
    if not len(samples) or lengths.sum() < 2:
        return [math.nan] * len(streams)
    times = np.concatenate(samples).astype(float, copy=False)
    sample_of = np.repeat(np.arange(len(samples)), lengths)
    gaps = np.diff(times)[sample_of[1:] == sample_of[:-1]]
    per_request = np.array([sum([max(len(t) - 1, 0) for t in r]) for r in streams], dtype=np.int64)
    has = per_request > 0
    longest = np.full(len(streams), math.nan)
    if has.any():
        starts = np.cumsum(per_request) - per_request
        longest[has] = np.maximum.reduceat(gaps, starts[has])
    return longest.tolist()


def _none_if_nan(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def mean_running_requests(steps: pd.DataFrame, weights: np.ndarray) -> float:
    """Requests in the running state during each step (holding KV, whether or not the step
    computes for them: a paper-era prompt-only step leaves the decoding ones out of its batch),
    averaged over time: weighted by step duration, so a short prompt-only step weighs what it
    lasts. ``mean_batch_size`` instead averages the requests in each step's batch over steps."""
    return float(np.average(steps["running_requests"].to_numpy(), weights=weights))


def block_saving(steps: pd.DataFrame, weights: np.ndarray) -> float | None:
    """The PagedAttention paper's sharing saving (section 6.3): blocks saved by sharing over the
    blocks the live sequences would hold without it, each step weighted by its duration like
    ``sharing_saving_frac`` (which counts filled token slots instead). None without blocks."""
    if "logical_blocks" not in steps:
        return None
    per_sequence = steps["logical_blocks"].to_numpy(dtype=float)
    distinct = steps["physical_blocks"].to_numpy(dtype=float)
    known = ~np.isnan(per_sequence)
    if not known.any():
        return None
    held = math.fsum(per_sequence[known] * weights[known])  # fsum: one rounding on every CPU
    return (held - math.fsum(distinct[known] * weights[known])) / held if held > 0 else None


def summarize(steps: pd.DataFrame, requests: pd.DataFrame, *, num_preemptions: int,
              prefix_hit_rate: float | None, percentiles=DEFAULT_PERCENTILES,
              goodput: dict[str, float] | None = None) -> tuple[dict, dict]:
    """The design's throughput, latency, batching, memory and outcome columns, then vLLM's
    serving metrics (``kvbench.metrics.serving_metrics``) at these percentiles and SLOs; and
    those serving metrics alone (the summary keeps its own value where both name a column)."""
    done = requests[requests["status"] == "finished"] if len(requests) else requests
    out: dict = {}
    if len(done):
        start = float(requests["arrival_s"].min())
        end = float(done["finish_s"].max())
        duration = end - start
    else:
        duration = float(steps["step_s"].sum()) if len(steps) else 0.0
    out["duration_s"] = duration
    out_tokens = float(done["generated_tokens"].sum()) if len(done) else 0.0  # output_len x samples unless EOS
    in_tokens = float(done["prompt_len"].sum()) if len(done) else 0.0
    out["request_throughput"] = len(done) / duration if duration > 0 else None
    out["output_token_throughput"] = out_tokens / duration if duration > 0 else None
    out["total_token_throughput"] = (out_tokens + in_tokens) / duration if duration > 0 else None
    for name, col in (("ttft", "ttft_s"), ("tpot", "tpot_s")):
        vals = done[col].dropna() if len(done) else pd.Series(dtype=float)
        out[f"mean_{name}_s"] = float(vals.mean()) if len(vals) else None
        out[f"p99_{name}_s"] = float(vals.quantile(0.99)) if len(vals) else None
    out["mean_e2e_s"] = float(done["e2e_s"].mean()) if len(done) else None
    out["normalized_latency_s"] = float(done["normalized_latency_s"].mean()) if len(done) else None
    if len(steps):
        out["mean_batch_size"] = float(steps["batch_size"].mean())
        out["max_batch_size"] = int(steps["batch_size"].max())
        weights = steps["step_s"].to_numpy()
        if weights.sum() <= 0:
            weights = np.ones(len(steps))
        out["mean_running_requests"] = mean_running_requests(steps, weights)
        for key in MEM_KEYS:
            out[key] = float(np.average(steps[key].to_numpy(), weights=weights))
        cached = steps["mem_cached_frac"].to_numpy()  # NaN where the allocator caches nothing
        out["mem_cached_frac"] = None if np.isnan(cached).all() else float(np.average(cached, weights=weights))
        # math.fsum, not np.dot: BLAS rounds a dot product differently on each CPU's kernel
        logical = math.fsum(steps["logical_slots"].to_numpy() * weights)
        physical = math.fsum(steps["token_slots"].to_numpy() * weights)
        out["sharing_saving_frac"] = (logical - physical) / logical if logical > 0 else None
        out["sharing_saving_block_frac"] = block_saving(steps, weights)
        out.update(group_memory(steps, weights))
    else:
        out.update(group_memory(steps, None))
        out.update({"mean_batch_size": None, "max_batch_size": None, "sharing_saving_frac": None,
                    "sharing_saving_block_frac": None, "mean_running_requests": None})
        out.update({key: None for key in (*MEM_KEYS, "mem_cached_frac")})
    out["num_preemptions"] = num_preemptions
    out["prefix_hit_rate"] = _none_if_nan(prefix_hit_rate)
    out["num_finished"] = int(len(done))
    out["num_rejected"] = int((requests["status"] == "rejected").sum()) if len(requests) else 0
    out.update(keep_up_columns(requests))
    serving = serving_metrics(requests, duration, percentiles=percentiles, goodput=goodput)
    return out | {k: v for k, v in serving.items() if k not in out}, serving
