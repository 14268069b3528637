"""Workloads: the request streams a run replays (``conf/workload/<name>.yaml``).

``build_workload(cfg, vocab_size=..., max_model_len=..., tokenizer_name=...)`` turns the
``workload`` config group into a :class:`Workload`: requests sorted by arrival with ids 0..N-1.

Knobs every workload takes (``COMMON_DEFAULTS``): ``num_requests``, ``request_rate`` (requests/s,
``inf`` = all at time 0), ``burstiness`` (gamma shape of the inter-arrival gaps at the same mean
rate; 1.0 = Poisson, as in vLLM's benchmark_serving), ``n`` (parallel samples), ``beam_width``,
``seed``, ``duration_s`` (if set: every arrival in [0, duration_s) at the rate, and num_requests
is ignored; needs a finite rate). Each workload adds its own (``WORKLOADS[name].defaults``).

Lengths that exceed the model: data workloads (sharegpt, alpaca) drop the pair before the
seeded draw (so N stays as asked), synthetic ones clip it (output first); shared_prefix builds
its base for max_model_len - prefix_len. Bad input raises :class:`WorkloadError` (one line).

Replayed traces (azure_conv, azure_code, mooncake_*; ``WorkloadSpec.replays_trace``) time their
own requests: they take ``REPLAY_COMMON_DEFAULTS`` instead of the arrival knobs (no
request_rate or burstiness; ``duration_s`` is the trace window, ``num_requests`` a cap), see
``traces``; the stream's ``request_rate`` is its mean replayed rate.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from kvbench.requests import Request

from . import (alpaca, arxiv, azure, chat_history, mooncake, multiturn, sharegpt, sharegpt_matched, shared_prefix,
               synthetic, system_prompts)
from .common import (COMMON_DEFAULTS, CommonKnobs, Knobs, ModelLimits, PromptSet, Workload, WorkloadError,
                     arrival_times, length_stats)
from .priorities import draw_classes, parse_shares
from .tokenizer import SMOLLM2, load_tokenizer

__all__ = ["COMMON_DEFAULTS", "REPLAY_COMMON_DEFAULTS", "SMOLLM2", "WORKLOADS", "Workload", "WorkloadError",
           "WorkloadSpec", "build_workload", "load_tokenizer"]


@dataclass(frozen=True)
class WorkloadSpec:
    name: str  # as in the config's ``name:``
    defaults: Mapping[str, Any]  # this workload's own knobs and their defaults (besides COMMON_DEFAULTS)
    build: Callable[[Knobs, CommonKnobs, int, ModelLimits], PromptSet]
    replays_trace: bool = False  # times its own requests from a trace file (no common arrival process)


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


_BASES = [
    WorkloadSpec("sharegpt", sharegpt.DEFAULTS, sharegpt.build_sharegpt),
    WorkloadSpec("alpaca", alpaca.DEFAULTS, alpaca.build_alpaca),
    WorkloadSpec("alpaca-synthetic", alpaca.SYNTHETIC_DEFAULTS, alpaca.build_alpaca_synthetic),
    WorkloadSpec("synthetic", synthetic.DEFAULTS, synthetic.build_synthetic),
]
_BASE_BY_KEY = {_key(spec.name): spec for spec in _BASES}


def _base_builder(name: str) -> tuple[str, Callable[..., PromptSet]]:
    spec = _BASE_BY_KEY[_key(name)]
    return spec.name, spec.build


def _shared_prefix_defaults(own: Mapping[str, Any] = shared_prefix.DEFAULTS) -> dict[str, Any]:
    """Its own knobs plus every base's (flat, so ``workload.prompt_len=...`` reaches the base)."""
    merged: dict[str, Any] = {}
    for spec in _BASES:
        for key, value in spec.defaults.items():
            assert merged.get(key, value) == value, f"bases disagree on the default of {key}"
            merged[key] = value
    return {**own, **merged}


WORKLOADS: dict[str, WorkloadSpec] = {
    **_BASE_BY_KEY,
    "shared_prefix": WorkloadSpec(
        "shared_prefix", _shared_prefix_defaults(),
        shared_prefix.make_shared_prefix_builder(_base_builder, tuple(spec.name for spec in _BASES))),
    "system_prompts": WorkloadSpec(
        "system_prompts", _shared_prefix_defaults(system_prompts.DEFAULTS),
        system_prompts.make_system_prompts_builder(_base_builder, tuple(spec.name for spec in _BASES))),
    "multiturn": WorkloadSpec("multiturn", multiturn.DEFAULTS, multiturn.build_multiturn),
    "sharegpt_chat": WorkloadSpec("sharegpt_chat", chat_history.DEFAULTS, chat_history.build_chat_history),
    "sharegpt_matched": WorkloadSpec("sharegpt_matched", sharegpt_matched.DEFAULTS,
                                     sharegpt_matched.build_sharegpt_matched),
    # production traces (see kvbench.workloads.traces)
    **{name: WorkloadSpec(name, azure.DEFAULTS, azure.make_builder(name), replays_trace=True)
       for name in azure.SHIPPED},
    **{name: WorkloadSpec(name, mooncake.DEFAULTS, mooncake.make_builder(name), replays_trace=True)
       for name in mooncake.SHIPPED},
    "arxiv_summarization": WorkloadSpec("arxiv_summarization", arxiv.DEFAULTS, arxiv.build_arxiv),
}

# The common knobs a replayed trace takes: its arrivals are the trace's, so no rate or burstiness.
REPLAY_COMMON_DEFAULTS: dict[str, Any] = {
    "num_requests": None,  # at most this many requests of the window (the first ones); null = all
    "duration_s": None,  # the window's length in trace seconds; null = to the trace's end
    **{key: COMMON_DEFAULTS[key] for key in ("n", "beam_width", "ignore_eos", "seed")},
}


def _plain(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    if isinstance(cfg, Mapping):
        return dict(cfg)
    raise WorkloadError(f"workload config must be a mapping, got {type(cfg).__name__}")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def build_workload(cfg: Any, *, vocab_size: int, max_model_len: int, tokenizer_name: str | None) -> Workload:
    """Build the request stream the ``workload`` config describes, for a model with these limits."""
    values = _plain(cfg)
    name = values.pop("name", None)
    allowed_names = ", ".join(spec.name for spec in WORKLOADS.values())
    if not isinstance(name, str) or _key(name) not in WORKLOADS:
        raise WorkloadError(f"workload.name: unknown workload {name!r}; allowed: {allowed_names}")
    spec = WORKLOADS[_key(name)]
    shares = parse_shares(values.pop("priority_shares", None))
    known = {**(REPLAY_COMMON_DEFAULTS if spec.replays_trace else COMMON_DEFAULTS), **spec.defaults}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise WorkloadError(f"workload.{unknown[0]}: not a knob of workload {spec.name}; "
                            f"allowed: {', '.join(sorted(known))}")
    knobs = Knobs({**known, **values}, spec.name)
    limits = ModelLimits(vocab_size=int(vocab_size), max_model_len=int(max_model_len), tokenizer_name=tokenizer_name)
    if spec.replays_trace:
        common = CommonKnobs.parse_replay(knobs)
        arrivals = np.zeros(0)  # the builder's own
        prompts = spec.build(knobs, common, common.num_requests, limits)
    else:
        common = CommonKnobs.parse(knobs)
        arrivals = arrival_times(common)
        prompts = spec.build(knobs, common, len(arrivals), limits)
    follow_ups = prompts.follow_ups or [None] * len(prompts.prompts)
    priorities = prompts.priorities or [None] * len(prompts.prompts)
    rows = list(zip(prompts.prompts, prompts.output_lens, arrivals, follow_ups, priorities))
    if prompts.arrivals is not None:  # the builder timed its own requests: order them by arrival
        rows = sorted(zip(prompts.prompts, prompts.output_lens, prompts.arrivals, follow_ups, priorities),
                      key=lambda row: row[2])
        arrivals = [row[2] for row in rows]
    if shares is not None:  # drawn in arrival order, on a stream of their own (kvbench.workloads.priorities)
        drawn = draw_classes(shares, len(rows), common.seed)
        rows = [(*row[:4], k) for row, k in zip(rows, drawn)]
    requests = [
        Request(request_id=i, prompt_ids=prompt, output_len=int(output_len), arrival_s=float(arrival),
                n=common.n, beam_width=common.beam_width, follow_up=follow, priority=priority)
        for i, (prompt, output_len, arrival, follow, priority) in enumerate(rows)
    ]
    next_id = len(requests)  # follow-up turns are numbered after every first turn
    for request in requests:
        follow = request.follow_up
        while follow is not None:
            follow.request_id, next_id = next_id, next_id + 1
            follow = follow.next
    meta = {
        "workload": prompts.name,
        "config_name": spec.name,
        "num_requests": len(requests),
        "burstiness": common.burstiness,
        "n": common.n,
        "beam_width": common.beam_width,
        "seed": common.seed,
        "duration_s": common.duration_s,
        "last_arrival_s": float(arrivals[-1]) if len(arrivals) else 0.0,
        **length_stats(prompts.prompts, prompts.output_lens),
        **prompts.meta,
        "knobs": knobs.values,
        **({"priority_shares": shares} if shares is not None else {}),
    }
    rate = prompts.meta["request_rate"] if spec.replays_trace else common.request_rate
    return Workload(name=prompts.name, requests=requests, request_rate=rate, meta=_json_safe(meta))
