"""Hydra multirun helpers: one comparison table of the sweep's runs at the end.

``ComparisonTable`` is registered in ``conf/config.yaml`` under ``hydra.callbacks``. When a
multirun ends (any launcher, any sweeper) it reads the results index and prints one table of
the runs whose directories lie under this sweep's directory, so joblib's interleaved job output
never has to be read; each job's own log stays in its ``app.log``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger("kvbench")


def sweep_runs(index_path: Path, sweep_dir: Path):
    """The index rows (a DataFrame) of runs stored under sweep_dir, in index order."""
    from kvbench.query import in_sweep
    from kvbench.results import load_index

    return in_sweep(load_index(index_path), index_path, sweep_dir).reset_index(drop=True)


class ComparisonTable(Callback):
    """Prints the comparison table of a multirun's jobs when it ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from kvbench.app import SHOW_COLUMNS, format_table

        index = Path(str(config.results_dir)) / "index.jsonl"
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not index.is_file():
            log.info("no runs finished in %s", sweep_dir)
            return
        runs = sweep_runs(index, sweep_dir)
        if runs.empty:
            log.info("no runs finished in %s", sweep_dir)
            return
        metric = str(config.get("optimized_metric") or "request_throughput")
        columns = [*SHOW_COLUMNS, *([metric] if metric not in SHOW_COLUMNS else [])]
        log.info("%d run(s) of this sweep (%s):\n%s", len(runs), sweep_dir,
                 format_table(runs.to_dict("records"), columns))
