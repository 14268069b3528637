"""What a scheduling policy costs, from the requests table: the summary columns of
``engine.policy`` and ``engine.preemption_victim`` (every run has them; null where they do not
apply, never a made-up 0).

- ``preempt_lost_tokens``: computed tokens discarded by preemptions by recompute (the
  "recompute tax"; a prefix cache may serve some of them back, counted in its hit rate);
  ``preempt_lost_tokens_per_preempted``: the mean over requests preempted at least once
  (null when none was);
- ``max_queue_wait_s``: the longest time a finished request spent queued (waiting or swapped,
  over all its stays); ``num_waited_over_bound``: finished requests queued longer than the
  aging bound ``engine.max_wait_s`` (null without a bound);
- ``jain_fairness_normalized_latency``: Jain's index (sum x)^2 / (n sum x^2) of the finished
  requests' normalized latency (end-to-end / output tokens): 1 when all are equal, 1/n when one
  request takes everything;
- per priority class k (only for a workload with priorities; ``num_priority_classes`` is null
  without): ``prio{k}_p50_ttft_s``, ``prio{k}_p99_ttft_s``, ``prio{k}_p50_e2e_s``,
  ``prio{k}_p99_e2e_s`` and ``prio{k}_num_finished``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from kvbench.engine.scheduler import SchedulerConfig


def jain_index(values: np.ndarray) -> float | None:
    """Jain's fairness index of non-negative values; None for none (or all zero)."""
    values = np.asarray(values, dtype=float)
    square_sum = float(np.dot(values, values))
    if not len(values) or square_sum <= 0:
        return None
    return float(values.sum()) ** 2 / (len(values) * square_sum)


def _quantile(values: pd.Series, q: float) -> float | None:
    values = values.dropna()
    return float(values.quantile(q)) if len(values) else None


def policy_settings(cfg: SchedulerConfig) -> dict:
    """The policy knobs of a run, as summary columns."""
    return {
        "policy": cfg.policy,
        "preemption_victim": cfg.preemption_victim,
        "keep_arrival_order": cfg.keep_arrival_order,
        "aging_bound_s": cfg.max_wait_s,
        "sjf_error": cfg.sjf_error if cfg.policy == "sjf" else None,
    }


def policy_summary(requests: pd.DataFrame, cfg: SchedulerConfig) -> dict:
    """The policy columns of one run's summary (see the module docstring)."""
    out = policy_settings(cfg)
    if len(requests):
        lost = requests["lost_tokens"].to_numpy()
        preempted = requests["num_preemptions"].to_numpy() > 0
        done = requests[requests["status"] == "finished"]
    else:
        lost, preempted, done = np.zeros(0), np.zeros(0, dtype=bool), requests
    out["preempt_lost_tokens"] = int(lost.sum())
    out["preempt_lost_tokens_per_preempted"] = float(lost[preempted].mean()) if preempted.any() else None
    waits = done["queue_wait_s"].to_numpy(dtype=float) if len(done) else np.zeros(0)
    out["max_queue_wait_s"] = float(waits.max()) if len(waits) else None
    bound = cfg.max_wait_s
    out["num_waited_over_bound"] = int((waits > bound).sum()) if bound is not None else None
    out["jain_fairness_normalized_latency"] = (
        jain_index(done["normalized_latency_s"].to_numpy(dtype=float)) if len(done) else None)
    classes = sorted(int(p) for p in done["priority"].dropna().unique()) if len(done) else []
    out["num_priority_classes"] = len(classes) if classes else None
    for k in classes:
        rows = done[done["priority"] == k]
        out[f"prio{k}_num_finished"] = int(len(rows))
        for name, col in (("ttft", "ttft_s"), ("e2e", "e2e_s")):
            out[f"prio{k}_p50_{name}_s"] = _quantile(rows[col], 0.5)
            out[f"prio{k}_p99_{name}_s"] = _quantile(rows[col], 0.99)
    return out
