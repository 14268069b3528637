"""Settings the run would not read, refused; settings that interact, said.

A command-line setting that this config would not read (``engine.sjf_error`` under
``engine.policy=fcfs``; ``workload.num_requests`` under ``workload.duration_s``, where the
duration wins) would make the run silently do something else than asked. ``check_conflicts``
refuses it in one line saying what is in force instead and what would make it act; when each
setting is read is declared once, in ``kvbench.config.reads``.

One pair is said, not refused, since both settings hold: ``engine.max_num_seqs`` below
``workload.max_concurrency`` (x samples of one request) caps the running batch, and the other
requests in flight wait in the engine's queue (``check_conflicts`` returns that line).
"""
from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from kvbench.config.errors import ConfigError
from kvbench.config.reads import unread_settings


def _samples(cfg: DictConfig) -> int:
    wl = cfg.workload
    return max(int(wl.get("n", 1) or 1), int(wl.get("beam_width", 1) or 1))


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


def explicit_keys(overrides: list[str]) -> list[str]:
    """The keys and groups a command line sets (``a.b=1``, ``+a.b=1``, ``gpu=h200``), in order."""
    keys: dict[str, None] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        if not override.is_delete():
            keys[override.key_or_group.split("@", 1)[0]] = None
    return list(keys)


def check_conflicts(cfg: DictConfig, overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """The one-line notes of settings that both hold but interact (which one wins), and the
    refusals: command-line setting -> the line saying why this config would not read it
    (``kvbench.config.reads``). A sweep refuses a setting only when every job ignores it
    (``engine.preemption=recompute,swap engine.swap_space_bytes=1e9``: the swap jobs use it;
    ``kvbench.run.precheck.precheck`` counts)."""
    keys = explicit_keys(overrides)
    notes = []
    if {"workload.max_concurrency", "engine.max_num_seqs"} & set(keys):
        note = _concurrency_note(cfg)
        notes += [note] if note else []
    return notes, unread_settings(cfg, keys)


def first_refusal(cfg: DictConfig, overrides: list[str]) -> None:
    """Raise ConfigError with the first setting of ``overrides`` this one config would not read
    (a tool that runs its jobs itself, such as ``kvbench-capacity``)."""
    _, refusals = check_conflicts(cfg, overrides)
    if refusals:
        raise ConfigError(next(iter(refusals.values())))
