"""The logger interface the app talks to, and a logger that does nothing.

The app calls, in order: ``start`` once, ``log_step`` once per engine step, then any of
``log_summary``, ``log_requests``, ``log_figures``, and ``finish`` in a ``finally``.
Nothing here imports a tracking library.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvbench.metrics import LATENCY_METRICS
from kvbench.results import naming

STEP_PREFIX = "steps/"  # per-step metrics are logged as steps/<name> against the "step" metric
STEP_METRIC = "step"  # the engine step index
RATE_PREFIX = "by_rate/"  # one history point per run keyed by request rate (latency-vs-rate lines)


# The summary a tracker keeps: the metrics people compare, each once (latencies in ms, as vLLM
# reports them; the design's *_s latency columns and the per-step history stay in the run dir).
SUMMARY_METRICS: tuple[str, ...] = (
    "request_throughput", "output_throughput", "total_token_throughput", "input_throughput",
    "request_goodput", "goodput", "max_output_tokens_per_s", "max_concurrent_requests", "concurrency",
    "normalized_latency_s", "mean_batch_size", "max_batch_size", "mean_running_requests",
    "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac",
    "num_preemptions", "prefix_hit_rate", "sharing_saving_frac", "num_finished", "num_rejected",
    "duration_s",
)  # fmt: skip
LATENCY_STATS = ("mean", "median", "p")  # mean_, median_ and every percentile of *_ms (not std)


def compared_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary row cut to SUMMARY_METRICS and the {mean,median,pP}_{ttft,tpot,itl,e2el}_ms columns."""
    def latency(key: str) -> bool:
        stat, _, rest = key.partition("_")
        metric, _, unit = rest.partition("_")
        return unit == "ms" and metric in LATENCY_METRICS and (stat in ("mean", "median") or stat[:1] == "p" and
                                                                 stat[1:].replace(".", "", 1).isdigit())

    return {k: v for k, v in summary.items() if v is not None and (k in SUMMARY_METRICS or latency(k))}


class Logger:
    """Base class: every method is a no-op, so subclasses override what they record."""

    def start(
        self,
        config: Mapping[str, Any],
        run_id: str,
        name: str,
        group: str | None = None,
        tags: Sequence[str] = (),
        *,
        run_dir: str | Path | None = None,
    ) -> None:
        """Open a run. ``config`` is the resolved (nested) config; ``run_dir`` the results dir."""

    def log_step(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one engine step's scalar metrics (called every step: must stay cheap)."""

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """Record the run's summary row (the results schema columns)."""

    def log_requests(self, requests) -> None:
        """Record the per-request table (a pandas DataFrame)."""

    def log_figures(self, paths: Sequence[str | Path]) -> None:
        """Record figure files (PNG and other raster images)."""

    def finish(self, exit_code: int = 0) -> None:
        """Close the run; safe to call more than once, and without a start."""


class NullLogger(Logger):
    """``logger=none``: records nothing."""


def flatten_config(config: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """Flatten nested mappings to ``{"a.b.c": value}``; sequences become plain lists.

    Works on plain dicts and on OmegaConf containers (DictConfig is a Mapping; interpolations
    resolve on access).
    """
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            if not node and prefix:
                out[prefix] = {}
            for key, value in node.items():
                walk(f"{prefix}{sep}{key}" if prefix else str(key), value)
        else:
            out[prefix] = _plain(node)

    walk("", config)
    return out


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, Sequence) and not isinstance(node, (str, bytes)):
        return [_plain(v) for v in node]
    return node


def run_tags(fields: Mapping[str, Any]) -> list[str]:
    """The standard run tags (``kvbench.results.naming.run_tags``): ``allocator=<label>``, ``reserve``,
    ``block_size``, ``workload``, ``request_rate``, ``experiment``; absent ones are skipped."""
    return naming.run_tags(fields)


def tags_from_config(flat_config: Mapping[str, Any]) -> list[str]:
    """The standard tags of a flattened run config (``allocator.name``, ``workload.name``, ...)."""
    return run_tags(naming.fields_from_config(flat_config))
