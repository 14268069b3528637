"""Settings that contradict each other: an override the run would ignore is refused.

When two settings decide the same thing, one wins and the other is ignored. That is documented
and fine while the loser is a default; when the user set the loser on the command line, the run
would silently do something else than asked (``workload.num_requests=50 workload.duration_s=10``
runs whatever ``duration_s`` gives). ``check_conflicts`` refuses such a command line in one line
that names both settings and says which one wins. Every pair is a row of ``CONFLICTS``:

- ``workload.num_requests`` under ``workload.duration_s`` (a generated stream: the duration wins);
- ``workload.time_scale`` under ``workload.target_rate`` (a replayed trace: the rate picks the scale);
- ``engine.gpu_memory_utilization`` under ``engine.kv_cache_bytes`` (sim), and on backend=hf;
- ``engine.kv_cache_fraction`` under ``engine.kv_cache_bytes`` (hf), and on backend=sim;
- ``engine.swap_space_bytes`` under ``engine.preemption=recompute`` (nothing is swapped), and
  with an offload host tier on (swapped K/V go to the host tier);
- ``engine.clock=wall`` on backend=sim (its clock is always the cost model);
- ``engine.attention``, ``engine.device``, ``engine.threads`` on backend=sim (hf knobs);
- ``gpu=...`` / ``gpu.*`` on backend=hf with the wall clock (the profile times only virtual steps);
- ``workload.ignore_eos=false`` on backend=sim (no token is EOS there);

One pair is said, not refused, since both settings hold: ``engine.max_num_seqs`` below
``workload.max_concurrency`` (x samples of one request) caps the running batch, and the other
requests in flight wait in the engine's queue (``check_conflicts`` returns that line).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from kvbench.config.errors import ConfigError


@dataclass(frozen=True)
class Conflict:
    loser: str  # the setting that would be ignored (a dotted key, or a group such as ``gpu``)
    applies: Callable[[DictConfig], bool]  # the winner is in force in this config
    why: Callable[[DictConfig], str]  # which one wins, in words


def _sim(cfg: DictConfig) -> bool:
    return cfg.backend.name == "sim"


def _replays(cfg: DictConfig) -> bool:
    return "start_s" in cfg.workload  # only replayed traces have a window start


def _set(cfg: DictConfig, group: str, key: str) -> bool:
    node = cfg.get(group)
    return node is not None and node.get(key) is not None


def _host_tier(cfg: DictConfig) -> bool:
    off = cfg.get("offload")
    if off is None:
        return False
    multiple = off.get("host_gpu_multiple")
    return bool(multiple) if multiple is not None else bool(off.get("host_bytes"))


def _samples(cfg: DictConfig) -> int:
    wl = cfg.workload
    return max(int(wl.get("n", 1) or 1), int(wl.get("beam_width", 1) or 1))


CONFLICTS: tuple[Conflict, ...] = (
    Conflict("workload.num_requests",
             lambda c: not _replays(c) and _set(c, "workload", "duration_s"),
             lambda c: f"workload.duration_s={c.workload.duration_s} wins (every arrival in "
                       f"[0, {c.workload.duration_s}) s is kept); set one of them, or workload.num_requests=null"),
    Conflict("workload.time_scale",
             lambda c: _replays(c) and _set(c, "workload", "target_rate"),
             lambda c: f"workload.target_rate={c.workload.target_rate} wins (it picks the time scale); "
                       "set one of them"),
    Conflict("engine.gpu_memory_utilization",
             lambda c: _sim(c) and c.engine.get("kv_cache_bytes") is not None,
             lambda c: f"engine.kv_cache_bytes={c.engine.kv_cache_bytes:g} wins (the pool is that size); set one of them"),
    Conflict("engine.gpu_memory_utilization",
             lambda c: not _sim(c),
             lambda c: "backend=hf sizes its pool with engine.kv_cache_fraction (or engine.kv_cache_bytes); "
                       "gpu_memory_utilization is the sim backend's"),
    Conflict("engine.kv_cache_fraction",
             lambda c: not _sim(c) and c.engine.get("kv_cache_bytes") is not None,
             lambda c: f"engine.kv_cache_bytes={c.engine.kv_cache_bytes:g} wins (the pool is that size); set one of them"),
    Conflict("engine.kv_cache_fraction",
             lambda c: _sim(c),
             lambda c: "backend=sim sizes its pool with engine.gpu_memory_utilization (or engine.kv_cache_bytes); "
                       "kv_cache_fraction is the hf backend's"),
    Conflict("engine.swap_space_bytes",
             lambda c: str(c.engine.preemption) != "swap",
             lambda c: f"engine.preemption={c.engine.preemption} swaps nothing; set engine.preemption=swap to use it"),
    Conflict("engine.swap_space_bytes",
             lambda c: str(c.engine.preemption) == "swap" and _host_tier(c),
             lambda c: f"offload={c.offload.name} wins: swapped K/V go to its host tier (one pool, one "
                       "accounting); size that with offload.host_bytes or offload.host_gpu_multiple"),
    Conflict("engine.clock",
             lambda c: _sim(c) and str(c.engine.get("clock")) != "virtual",
             lambda c: "backend=sim always times steps with the cost model (the virtual clock); "
                       "engine.clock is the hf backend's"),
    *(Conflict(f"engine.{key}", _sim,
               lambda c, k=key: f"engine.{k} is a knob of backend=hf; backend=sim runs no model")
      for key in ("attention", "device", "threads")),
    Conflict("gpu",
             lambda c: not _sim(c) and str(c.engine.get("clock", "wall")) == "wall",
             lambda c: "on backend=hf the gpu profile times steps only with engine.clock=virtual; "
                       "the wall clock measures this machine"),
    Conflict("workload.ignore_eos",
             lambda c: _sim(c) and c.workload.get("ignore_eos") is False,
             lambda c: "backend=sim has no EOS token: every sample runs to its output length; "
                       "ignore_eos=false is the hf backend's"),
)


def _concurrency_note(cfg: DictConfig) -> str | None:
    """``workload.max_concurrency`` above what ``engine.max_num_seqs`` runs at once: both hold (as in
    vLLM), the engine's cap wins for the batch and the rest wait in its queue. Said, not refused."""
    cap, seqs = cfg.workload.get("max_concurrency"), cfg.engine.get("max_num_seqs")
    if not isinstance(cap, int) or not isinstance(seqs, int) or seqs >= cap * _samples(cfg):
        return None
    per = f" of {_samples(cfg)} sequences each" if _samples(cfg) > 1 else ""
    return (f"engine.max_num_seqs={seqs} wins over workload.max_concurrency={cap}{per}: at most {seqs} "
            "sequences run at once, the other requests in flight wait in the engine's queue (their TTFT "
            "counts the wait)")


def explicit_keys(overrides: list[str]) -> set[str]:
    """The keys and groups a command line sets (``a.b=1``, ``+a.b=1``, ``gpu=h200``)."""
    keys: set[str] = set()
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_delete():
            continue
        keys.add(override.key_or_group)
    return keys


def _is_set(name: str, keys: set[str]) -> bool:
    """The command line sets ``name`` itself, or (for a group) one of its fields."""
    return name in keys or (("." not in name) and any(k.startswith(name + ".") for k in keys))


def check_conflicts(cfg: DictConfig, overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """The one-line notes of settings that both hold but interact (which one wins), and the
    refusals: command-line setting -> the line saying which setting overrules it in this config.
    A sweep refuses a setting only when every job ignores it (``engine.preemption=recompute,swap
    engine.swap_space_bytes=1e9``: the swap jobs use it; ``kvbench.run.precheck.precheck`` counts)."""
    keys = explicit_keys(overrides)
    notes, refusals = [], {}
    if {"workload.max_concurrency", "engine.max_num_seqs"} & keys:
        note = _concurrency_note(cfg)
        notes += [note] if note else []
    for conflict in CONFLICTS:
        if conflict.loser in refusals or not _is_set(conflict.loser, keys) or not conflict.applies(cfg):
            continue
        if "." not in conflict.loser:
            value = f"={cfg[conflict.loser].get('name')}"
        else:
            group, key = conflict.loser.split(".", 1)
            current = cfg[group].get(key)
            if current is None:
                continue  # set to null: nothing to ignore
            value = f"={_text(current)}"
        refusals[conflict.loser] = f"{conflict.loser}{value} would be ignored: {conflict.why(cfg)}"
    return notes, refusals


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)
