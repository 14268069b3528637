"""One seed per run: the top-level ``seed`` seeds every random choice unless a group sets its own.

A config group that draws random numbers has a ``seed`` key (today ``workload.seed``: request
sampling, lengths, arrivals, prompt ids). ``null`` there means *the run's seed*; a number wins.
``resolve_seeds`` writes the inherited value into the composed config before anything reads it,
so the run's record (its config, its summary's ``*_seed`` columns, the W&B config) holds the
seeds actually used. The engine (the ``sjf`` predictor's noise) and the executors (sim's
placeholder tokens; hf's dummy weights and sampling) read the top-level seed itself.

Each consumer draws on streams of its own, tagged by purpose (``rng_for(seed, "arrivals")``,
``random.Random(f"sjf:{seed}:{request}")``, hf's ``SeedSequence`` per request, sample and
position), so one seed value serves every purpose without two sharing draws: the per-purpose
seed is the run's seed itself, and seed 0 gives exactly the draws of the runs made before
``workload.seed`` inherited it (it was 0 in every workload file).
"""
from __future__ import annotations

from omegaconf import DictConfig, open_dict, read_write

SEED_KEY = "seed"


def seeded_groups(cfg: DictConfig) -> list[str]:
    """The top-level groups of ``cfg`` that hold a seed of their own (``workload``), in order."""
    return [name for name in cfg if name != "hydra" and isinstance(cfg._get_node(name), DictConfig)
            and not cfg._get_node(name)._is_none() and SEED_KEY in cfg[name]]


def resolve_seeds(cfg: DictConfig) -> None:
    """Fill every group's null ``seed`` with the run's ``seed``, in place (an explicit one wins)."""
    for name in seeded_groups(cfg):
        group = cfg[name]
        if group[SEED_KEY] is None:
            with read_write(group), open_dict(group):
                group[SEED_KEY] = cfg[SEED_KEY]


def seeds_used(cfg: DictConfig) -> dict[str, int | None]:
    """The seeds a resolved run used, for its summary: ``seed`` and ``<group>_seed`` per group."""
    used: dict[str, int | None] = {SEED_KEY: int(cfg[SEED_KEY])}
    for name in seeded_groups(cfg):
        value = cfg[name][SEED_KEY]
        used[f"{name}_{SEED_KEY}"] = int(value) if value is not None else None
    return used
