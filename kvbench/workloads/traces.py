"""What the replayed production traces share: reading a shipped or given trace file, the
replay window and time scale, and the arrival statistics the summary records.

A trace file is a CSV with a header or a JSON-lines file, either plain or gzip-compressed
(``.gz``). The shipped copies live in ``data/traces/`` with their source and license (see its
README). Every failure is one line (:class:`WorkloadError`): a missing file, a file that is
not the trace it should be (foreign: wrong columns or keys), a torn line, a window outside the
trace, a time scale of 0 or below.

Replay. The window keeps the requests whose trace time ``t`` is in ``[start_s, start_s +
duration_s)`` (``duration_s`` null: to the end), then at most ``num_requests`` of them (the
first ones). Replayed arrivals are ``(t - t_first) * time_scale`` where ``t_first`` is the
first kept request's time, so the stream starts at 0 as every workload does; ``time_scale``
< 1 compresses time (a higher rate), > 1 stretches it, and the burst shape (every gap relative
to the mean gap) is unchanged. ``target_rate`` (requests/s) instead picks the time scale that
gives the window that mean rate: ``time_scale = (N - 1) / span / target_rate``, over the
requests that are replayed (those the overlong policy drops do not count).

Seeds. A trace's lengths and arrivals are its own, so the seed picks *which* window of the
asked size is replayed: seed ``k`` replays window ``k mod W`` of the ``W`` whole windows that
follow ``start_s`` (windows of ``duration_s`` seconds; without a duration, of ``num_requests``
requests), seed 0 the first, at ``start_s``. A window as long as the trace (the default: all of
it) is the only one, so its seeds differ in the synthetic prompt ids alone.
"""
from __future__ import annotations

import csv
import gzip
import importlib.resources
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import Knobs, WorkloadError, seed_knob

TRACE_DIR = ("data", "traces")

# Knobs every replayed trace takes (besides n, beam_width, ignore_eos, seed, num_requests, duration_s).
REPLAY_DEFAULTS: dict[str, Any] = {
    "path": None,  # a trace file of the same format; null = the shipped copy
    "start_s": 0.0,  # window start, seconds of trace time
    "time_scale": 1.0,  # replayed gap = trace gap * time_scale (< 1: faster)
    "target_rate": None,  # requests/s over the window; sets the time scale instead (time_scale must stay 1)
}


def open_trace_text(path: str | None, shipped: str) -> tuple[str, str]:
    """(the file's text, its name for messages); ``path`` None reads the shipped copy."""
    if path is None:
        resource = importlib.resources.files(__package__).joinpath(*TRACE_DIR, shipped)
        name = f"shipped {shipped}"
        try:
            raw = resource.read_bytes()
        except OSError as exc:
            raise WorkloadError(f"{name}: cannot read ({exc})") from None
    else:
        file = Path(path).expanduser()
        name = str(file)
        if not file.is_file():
            raise WorkloadError(f"workload.path: no such file {name!r}")
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise WorkloadError(f"workload.path: cannot read {name!r} ({exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise WorkloadError(f"{name}: torn or broken gzip file ({exc})") from None
    try:
        return raw.decode("utf-8"), name
    except UnicodeDecodeError:
        raise WorkloadError(f"{name}: not a text trace (not UTF-8)") from None


def read_csv_columns(text: str, name: str, columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named numeric columns of a CSV trace; a foreign header or a torn row is an error."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise WorkloadError(f"{name}: empty file, expected a CSV with columns {', '.join(columns)}")
    missing = [c for c in columns if c not in header]
    if missing:
        raise WorkloadError(f"{name}: not this trace: no column {missing[0]!r} (header {','.join(header)[:80]!r}; "
                            f"expected {', '.join(columns)})")
    where = [header.index(c) for c in columns]
    values: list[list[float]] = [[] for _ in columns]
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, header has {len(header)}")
            numbers = [float(row[i]) for i in where]
            if not all(math.isfinite(x) for x in numbers):
                raise ValueError("not a finite number")
        except ValueError as exc:
            raise WorkloadError(f"{name}: torn or bad row at line {line} ({exc})") from None
        for column, number in zip(values, numbers):
            column.append(number)
    if not values[0]:
        raise WorkloadError(f"{name}: no rows after the header")
    return {c: np.asarray(v) for c, v in zip(columns, values)}


def read_jsonl(text: str, name: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every record of a JSON-lines trace; a torn line or a record without ``keys`` is an error."""
    records = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            what = "not a JSON-lines trace" if not records else "torn or bad JSON"
            raise WorkloadError(f"{name}: {what} at line {line} ({exc.msg})") from None
        if not isinstance(record, dict) or any(k not in record for k in keys):
            raise WorkloadError(f"{name}: not this trace: line {line} lacks one of the keys {', '.join(keys)}")
        records.append(record)
    if not records:
        raise WorkloadError(f"{name}: no records")
    return records


MAX_TRACE_TOKENS = 2**31 - 1  # no logged request is longer; past it a length is corrupt, not overlong


def record_numbers(name: str, records: list[dict[str, Any]], key: str) -> np.ndarray:
    """One JSON key of every record as floats; a null, a string, a boolean or a non-finite value
    is refused in one line naming the record (never read as NaN and dropped by the window)."""
    values = np.empty(len(records), dtype=np.float64)
    for i, record in enumerate(records):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise WorkloadError(f"{name}: record {i} has {key} {json.dumps(value)}; every record needs a finite number")
        values[i] = value
    return values


def check_lengths(name: str, prompt_lens: np.ndarray, output_lens: np.ndarray,
                  records: np.ndarray | None = None) -> None:
    """Token counts must be whole numbers in 1..MAX_TRACE_TOKENS; ``records`` maps positions to
    the records named in the message."""
    bad = np.flatnonzero(~((prompt_lens >= 1) & (output_lens >= 1) & (prompt_lens <= MAX_TRACE_TOKENS)
                           & (output_lens <= MAX_TRACE_TOKENS) & (prompt_lens == np.rint(prompt_lens))
                           & (output_lens == np.rint(output_lens))))
    if bad.size:
        i = int(bad[0])
        where = f"record {int(records[i])}" if records is not None else f"request {i}"
        raise WorkloadError(f"{name}: {where} has prompt {prompt_lens[i]:g} and output {output_lens[i]:g} "
                            f"tokens; both must be whole numbers from 1 to {MAX_TRACE_TOKENS:,}")


@dataclass(frozen=True)
class Window:
    """Which part of a trace is replayed, and how fast; see the module docstring."""

    start_s: float
    duration_s: float | None
    num_requests: int | None
    time_scale: float
    target_rate: float | None
    seed: int = 0  # picks the window (module docstring, "Seeds")

    @classmethod
    def parse(cls, knobs: Knobs) -> "Window":
        time_scale = knobs.get_float("time_scale", positive=True)
        target = knobs.get_float("target_rate", positive=True, optional=True)
        if target is not None and time_scale != 1.0:
            raise knobs.fail("time_scale", "must stay 1.0 when workload.target_rate is set (it picks the scale)",
                             knobs.raw("time_scale"))
        return cls(start_s=knobs.get_float("start_s", min_value=0.0),
                   duration_s=knobs.get_float("duration_s", positive=True, optional=True),
                   num_requests=knobs.get_int("num_requests", min_value=1, optional=True),
                   time_scale=time_scale, target_rate=target, seed=seed_knob(knobs))

    def select(self, times_s: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, float]:
        """(indices of the kept requests, their replayed arrivals, the time scale used).

        With ``target_rate`` the scale makes exactly these requests arrive at that mean rate;
        a builder that then drops some (overlong) calls ``rescale`` on the ones it keeps."""
        if times_s.size and np.any(np.diff(times_s) < 0):
            raise WorkloadError(f"{name}: arrival times go backwards; not a trace in arrival order")
        first, last = float(times_s[0]), float(times_s[-1])
        start = self.placed_start(last - first)
        end = math.inf if self.duration_s is None else start + self.duration_s
        keep = np.flatnonzero((times_s >= first + start) & (times_s < first + end))
        if keep.size == 0:
            raise WorkloadError(f"workload.start_s: the window [{start:g}, {end:g}) s holds no request of "
                                f"{name} (its requests span 0..{last - first:g} s)")
        if self.num_requests is not None:
            keep = self._count_window(keep)
        t = times_s[keep] - times_s[keep[0]]
        scale = self.time_scale
        if self.target_rate is not None:
            if keep.size < 2 or t[-1] <= 0:
                raise WorkloadError(f"workload.target_rate: the window holds {keep.size} request(s) at one instant; "
                                    "no rate to scale")
            scale = (keep.size - 1) / float(t[-1]) / self.target_rate
        return keep, t * scale, scale

    def placed_start(self, span_s: float) -> float:
        """The start of the seed's window of ``duration_s`` seconds (trace seconds from the first request)."""
        if self.duration_s is None:
            return self.start_s
        fits = max(1, int((span_s - self.start_s) // self.duration_s))
        return self.start_s + (self.seed % fits) * self.duration_s

    def _count_window(self, keep: np.ndarray) -> np.ndarray:
        """The seed's ``num_requests`` of ``keep``: its window's first ones when a duration placed
        the window, else the seed's run of ``num_requests`` consecutive ones."""
        count = self.num_requests
        if self.duration_s is not None:
            return keep[:count]
        index = self.seed % max(1, keep.size // count)
        return keep[index * count:(index + 1) * count]

    def rescale(self, arrivals: np.ndarray, scale: float, kept: np.ndarray) -> tuple[np.ndarray, float]:
        """The arrivals and scale for the ``kept`` positions of ``arrivals`` alone: unchanged
        without a target rate; with one, scaled again so that the kept requests arrive at it."""
        if self.target_rate is None or kept.size == arrivals.size:
            return arrivals, scale
        if kept.size < 2 or arrivals[kept[-1]] <= arrivals[kept[0]]:
            raise WorkloadError(f"workload.target_rate: {kept.size} request(s) of the window fit the model, "
                                "at one instant; no rate to scale")
        factor = (kept.size - 1) / float(arrivals[kept[-1]] - arrivals[kept[0]]) / self.target_rate
        return arrivals * factor, scale * factor


def interarrival_cv(arrivals: np.ndarray | list[float]) -> float | None:
    """Coefficient of variation of the gaps between arrivals (1 for Poisson, 0 for a metronome);
    None with fewer than two gaps or when every request arrives at once."""
    gaps = np.diff(np.asarray(arrivals, dtype=np.float64))
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def mean_rate(arrivals: np.ndarray) -> float:
    """Requests per second over the replayed span ((N - 1) gaps); inf when all arrive at once."""
    span = float(arrivals[-1] - arrivals[0]) if arrivals.size else 0.0
    return (arrivals.size - 1) / span if span > 0 else math.inf


def replay_meta(name: str, source: str, window: Window, scale: float, arrivals: np.ndarray,
                trace_times: np.ndarray, num_in_trace: int) -> dict[str, Any]:
    return {
        "source": source,
        "trace_file": name,
        "trace_requests": num_in_trace,
        "window_start_s": window.start_s,  # as asked; the seed may place the window later (module docstring)
        "window_seed": window.seed,
        "window_duration_s": window.duration_s,
        "window_trace_span_s": float(trace_times[-1] - trace_times[0]),
        "time_scale": scale,
        "target_rate": window.target_rate,
        "trace_mean_rate": mean_rate(trace_times),
        "request_rate": mean_rate(arrivals),
        "burstiness": None,  # the gamma-shape knob does not apply: gaps are the trace's
        "arrival_cv": interarrival_cv(arrivals),
        "real_prompts": False,
    }
