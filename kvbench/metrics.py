"""Serving metrics as ``vllm bench serve`` reports them: latency statistics in milliseconds,
throughput, and goodput under SLOs.

Definitions (the same as vLLM's ``benchmarks/serve.py``, so the two summaries read alike):

- TTFT: first token time minus arrival time, per completed request.
- TPOT: (end-to-end latency - TTFT) / (tokens of the longest sample - 1), per completed request with more
  than one output token (the first token is excluded).
- ITL: the gaps between consecutive tokens of a request's stream, pooled over every completed
  request (a long stall, such as a preemption, is one large ITL sample). A request with
  parallel samples or beams has one stream per sample (``token_times_s`` holds one array per
  sample); each contributes its gaps, so with n = 1 this is exactly vLLM's ITL.
- E2EL: finish time minus arrival time, per completed request.
- Statistics: mean, median, population standard deviation (numpy's default, ddof=0) and
  linearly interpolated percentiles (``numpy.percentile``); a percentile ``P`` is the column
  ``p{P}_{metric}_ms`` with ``P`` written as vLLM writes it (``p99``, ``p99.9``).
- Throughput: completed requests, input (prompt) tokens, output tokens and prompt + output
  tokens, each divided by the run's duration.
- Peaks, as vLLM computes them: one-second buckets from the first arrival of a completed
  request; ``max_output_tokens_per_s`` is the most tokens emitted in one bucket,
  ``max_concurrent_requests`` the most completed requests whose [arrival, finish] touches one
  bucket. ``concurrency`` is SGLang's mean in-flight concurrency: the sum of E2E latencies
  divided by the duration.
- Goodput: a completed request is good when every configured SLO holds (TTFT, TPOT, E2EL
  <= their limit in ms; a one-token request's TPOT counts as 0). ``request_goodput`` is good
  requests per second (vLLM's); ``goodput`` is their output tokens per second.

Statistics with no sample are None (null), never a made-up 0.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_METRICS = ("ttft", "tpot", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (90.0, 95.0, 99.0)


class MetricsConfigError(ValueError):
    """A malformed ``metrics.*`` value; the message is one line naming the key."""


def percentile_word(p: float) -> str:
    """``99`` -> ``"99"``, ``99.9`` -> ``"99.9"`` (vLLM's column spelling)."""
    return str(int(p)) if float(p).is_integer() else str(p)


def parse_percentiles(value: object) -> tuple[float, ...]:
    """Percentiles from a list of numbers or a comma-separated string; each in (0, 100]."""
    if value is None:
        return DEFAULT_PERCENTILES
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[arg-type]
    out = []
    for item in items:
        try:
            p = float(item)
        except (TypeError, ValueError):
            raise MetricsConfigError(f"metrics.percentiles: {item!r} is not a number") from None
        if not 0 < p <= 100:
            raise MetricsConfigError(f"metrics.percentiles must lie in (0, 100]; got {item!r}")
        out.append(p)
    return tuple(dict.fromkeys(out))


def parse_goodput(value: object) -> dict[str, float]:
    """SLOs in ms from vLLM's ``--goodput`` syntax: ``"ttft:500 tpot:50 e2el:2000"``.

    Also accepts a mapping ``{ttft: 500}``; None or "" means no SLO (goodput not computed).
    """
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        pairs = []
        for item in str(value).replace(",", " ").split():
            name, sep, limit = item.partition(":")
            if not sep:
                raise MetricsConfigError(f"metrics.goodput: {item!r} is not NAME:MS (e.g. ttft:500 tpot:50)")
            pairs.append((name, limit))
    slos: dict[str, float] = {}
    for name, limit in pairs:
        if name not in SLO_METRICS:
            raise MetricsConfigError(f"metrics.goodput: {name!r} is not one of {', '.join(SLO_METRICS)}")
        try:
            ms = float(limit)
        except (TypeError, ValueError):
            raise MetricsConfigError(f"metrics.goodput: {name}:{limit} is not a number of ms") from None
        if not ms > 0 or math.isinf(ms):
            raise MetricsConfigError(f"metrics.goodput: {name} must be a positive number of ms; got {limit}")
        slos[name] = ms
    return slos


def request_itls(token_times: Sequence[float] | np.ndarray) -> np.ndarray:
    """Inter-token gaps (s) of one token stream (one sample of a request)."""
    return np.diff(np.asarray(token_times, dtype=float))


def peaks(arrival_s: np.ndarray, finish_s: np.ndarray, token_times: Sequence[np.ndarray]) -> tuple[float, int]:
    """(Most output tokens in one second, most requests in flight in one second), over one-second
    buckets counted from the first arrival; (0, 0) without a request."""
    if len(arrival_s) == 0:
        return 0.0, 0
    start = float(np.min(arrival_s))
    buckets = int(np.ceil(float(np.max(finish_s)) - start)) + 1
    times = np.concatenate([np.asarray(t, dtype=float) for t in token_times]) if len(token_times) else np.empty(0)
    tokens = np.bincount(np.clip((times - start).astype(int), 0, buckets - 1), minlength=buckets)
    spans = np.zeros(buckets + 1, dtype=int)  # +1 from a request's first bucket through its last
    np.add.at(spans, (arrival_s - start).astype(int), 1)
    np.add.at(spans, (finish_s - start).astype(int) + 1, -1)
    return float(tokens.max()), int(np.cumsum(spans)[:-1].max())


def _stats(name: str, values_s: np.ndarray, percentiles: Sequence[float]) -> dict[str, float | None]:
    if len(values_s) == 0:
        keys = [f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms"]
        keys += [f"p{percentile_word(p)}_{name}_ms" for p in percentiles]
        return dict.fromkeys(keys)
    ms = values_s * 1000.0
    out: dict[str, float | None] = {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
    }
    for p, value in zip(percentiles, np.percentile(ms, list(percentiles))):
        out[f"p{percentile_word(p)}_{name}_ms"] = float(value)
    return out


def serving_metrics(
    requests: pd.DataFrame,
    duration_s: float,
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Mapping[str, float] | None = None,
) -> dict[str, float | int | None]:
    """vLLM's serving summary from a requests table (``kvbench.engine.recorder.requests_frame``).

    Uses the columns status, prompt_len, generated_len and generated_tokens (else output_len,
    n and beam_width), ttft_s, e2e_s and token_times_s. ``goodput`` maps SLO names to ms; without it goodput columns are None.
    """
    done = requests[requests["status"] == "finished"] if len(requests) else requests
    failed = int((requests["status"] != "finished").sum()) if len(requests) else 0
    rate = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: None)
    if len(done):
        if "generated_tokens" in done:  # what the samples really produced (an EOS may stop them early)
            out_tokens_per_request = done["generated_tokens"].to_numpy(dtype=float)
            output_len = done["generated_len"].to_numpy(dtype=float)
        else:
            samples = np.where(done["beam_width"].to_numpy() > 1, 1, done["n"].to_numpy())
            out_tokens_per_request = done["output_len"].to_numpy() * samples
            output_len = done["output_len"].to_numpy()
        if "generated_len" in done:  # fewer than output_len where samples stopped at EOS (ignore_eos=false)
            out_tokens_per_request = done["generated_tokens"].to_numpy()
            output_len = done["generated_len"].to_numpy()
        ttft = done["ttft_s"].to_numpy(dtype=float)
        e2el = done["e2e_s"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot_all = np.where(output_len > 1, (e2el - ttft) / np.maximum(output_len - 1, 1), 0.0)
        tpot = tpot_all[output_len > 1]
        gaps = [request_itls(t) for samples in done["token_times_s"] for t in samples] \
            if "token_times_s" in done else []
        itl = np.concatenate(gaps) if gaps else np.array([])
        streams = [t for samples in done["token_times_s"] for t in samples] if "token_times_s" in done else []
        peak_tokens, peak_requests = peaks(done["arrival_s"].to_numpy(dtype=float),
                                           done["finish_s"].to_numpy(dtype=float), streams) \
            if {"arrival_s", "finish_s"} <= set(done.columns) else (None, None)
    else:
        peak_tokens = peak_requests = None
        out_tokens_per_request = output_len = ttft = e2el = tpot_all = tpot = itl = np.array([])
    total_output = int(np.sum(out_tokens_per_request))
    total_input = int(done["prompt_len"].sum()) if len(done) else 0
    out: dict[str, float | int | None] = {
        "completed": int(len(done)),
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": rate(len(done)),
        "input_throughput": rate(total_input),
        "output_throughput": rate(total_output),
        "total_token_throughput": rate(total_input + total_output),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "concurrency": rate(float(np.sum(e2el))) if len(done) else None,
    }
    good_requests = good_tokens = None
    if goodput:
        good = np.ones(len(done), dtype=bool)
        for name, values in (("ttft", ttft), ("tpot", tpot_all), ("e2el", e2el)):
            if name in goodput:
                good &= values <= goodput[name] / 1000.0
        good_requests = rate(int(good.sum()))
        good_tokens = rate(int(np.sum(out_tokens_per_request[good])))
    out["request_goodput"] = good_requests
    out["goodput"] = good_tokens
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        out.update(_stats(name, values, percentiles))
    return out


def metric_columns(percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> tuple[str, ...]:
    """The latency column names serving_metrics writes for these percentiles, in order."""
    stats = ["mean", "median", "std", *(f"p{percentile_word(p)}" for p in percentiles)]
    return tuple(f"{s}_{m}_ms" for m in LATENCY_METRICS for s in stats)


def format_report(summary: Mapping[str, object], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> str:
    """The summary laid out like ``vllm bench serve``'s result block, to read side by side."""
    def num(key: str, fmt: str = "{:.2f}") -> str:
        value = summary.get(key)
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)

    lines = ["{:=^50}".format(" Serving Benchmark Result ")]
    rows = [("Successful requests:", num("completed", "{}")), ("Failed requests:", num("failed", "{}"))]
    if summary.get("max_concurrency") is not None:
        rows.append(("Maximum request concurrency:", num("max_concurrency", "{}")))
    rows += [
        ("Request rate configured (RPS):", num("request_rate")),
        ("Request burstiness:", num("burstiness")),
        ("Benchmark duration (s):", num("duration_s")),
        ("Total input tokens:", num("total_input_tokens", "{}")),
        ("Total generated tokens:", num("total_output_tokens", "{}")),
        ("Request throughput (req/s):", num("request_throughput")),
    ]
    if summary.get("request_goodput") is not None:
        rows.append(("Request goodput (req/s):", num("request_goodput")))
    rows += [("Input token throughput (tok/s):", num("input_throughput")),
             ("Output token throughput (tok/s):", num("output_throughput")),
             ("Peak output token throughput (tok/s):", num("max_output_tokens_per_s")),
             ("Peak concurrent requests:", num("max_concurrent_requests", "{}")),
             ("Total Token throughput (tok/s):", num("total_token_throughput")),
             ("Concurrency (mean in flight):", num("concurrency"))]
    lines += [f"{label:<40} {value:<10}" for label, value in rows]
    headers = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
               "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency")}
    for metric, (short, header) in headers.items():
        lines.append("{:-^50}".format(header))
        lines.append(f"{f'Mean {short} (ms):':<40} {num(f'mean_{metric}_ms'):<10}")
        lines.append(f"{f'Median {short} (ms):':<40} {num(f'median_{metric}_ms'):<10}")
        for p in percentiles:
            word = percentile_word(p)
            lines.append(f"{f'P{word} {short} (ms):':<40} {num(f'p{word}_{metric}_ms'):<10}")
    lines.append("=" * 50)
    return "\n".join(lines)
