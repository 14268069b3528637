"""The scheduling-policy knobs of ``conf/engine``: read into ``SchedulerConfig`` fields, and the
pre-check that needs the workload (a priority order needs every request's priority)."""
from __future__ import annotations

from kvbench.config.errors import ConfigError

NEEDS_PRIORITY = {"policy": "priority", "preemption_victim": "lowest_priority"}


def policy_knobs(cfg) -> dict:
    """``SchedulerConfig`` fields from ``engine.*`` (absent keys keep today's behaviour)."""
    eng = cfg.engine
    max_wait = eng.get("max_wait_s")
    return {
        "policy": str(eng.get("policy") or "fcfs"),
        "max_wait_s": float(max_wait) if max_wait is not None else None,
        "sjf_error": float(eng.get("sjf_error", 0.0) or 0.0),
        "preemption_victim": str(eng.get("preemption_victim") or "newest"),
        "keep_arrival_order": bool(eng.get("keep_arrival_order", True)),
        "seed": int(cfg.seed),
    }


def check_priorities(cfg, requests) -> None:
    """``engine.policy=priority`` and ``engine.preemption_victim=lowest_priority`` read each
    request's priority: refuse a stream where one has none, naming how to give them."""
    eng = cfg.engine
    for key, value in NEEDS_PRIORITY.items():
        if eng.get(key) != value:
            continue
        missing = sum(1 for r in requests if r.priority is None)
        if missing:
            trace = "priority_field" in cfg.workload
            source = ("workload.priority_field (a column of the trace) or workload.priority_shares"
                      if trace else "+workload.priority_shares=[...] (class shares, e.g. [0.2,0.8])")
            raise ConfigError(f"engine.{key}={value} needs a priority on every request; {missing} of "
                              f"{len(requests)} have none: set {source}")
