"""One W&B run per multirun holding the sweep's comparison table (``logger=wandb`` only).

The driver process logs it when the multirun ends, in the sweep's group (the same group as its
jobs), with ``job_type="sweep-table"``, offline unless ``logger.mode=online``; its files go under
the sweep directory.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from kvbench.results.naming import missing


def table_rows(rows: Sequence[Mapping], columns: Sequence[str]) -> list[list]:
    """Rows as W&B table data: numbers stay numbers, a value that does not apply is None."""
    def value(v: object) -> object:
        if missing(v):
            return None
        return v if isinstance(v, (int, float, bool)) else str(v)

    return [[value(r.get(c)) for c in columns] for r in rows]


def log_sweep_table(config: DictConfig, rows: Sequence[Mapping], columns: Sequence[str]) -> str:
    """Log the table as ``sweep_table`` in a run of its own; returns that run's id."""
    import wandb  # optional dependency: wandb, for logger=wandb

    logger = config.logger
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    group = logger.get("group") or f"{config.experiment_name}-{sweep_dir.name}"
    run = wandb.init(project=str(logger.get("project") or "kvbench"), entity=logger.get("entity"),
                     mode=str(logger.get("mode") or "offline"), group=str(group), job_type="sweep-table",
                     name=f"{config.experiment_name}-{sweep_dir.name}-table", dir=str(sweep_dir),
                     config={"sweep_dir": str(sweep_dir), "experiment": str(config.experiment_name),
                             "swept": OmegaConf.to_container(config.hydra.overrides.task)},
                     settings=wandb.Settings(silent=not bool(logger.get("verbose", False))),
                     reinit="finish_previous")
    try:
        run.log({"sweep_table": wandb.Table(columns=list(columns), data=table_rows(rows, columns))})
        return run.id
    finally:
        run.finish()
