"""What a run shows on the console: its progress bar and the one-row-per-run summary table."""
from __future__ import annotations

import sys

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from kvbench.results.naming import allocator_label, cell, hydra_choice


def _job_label(cfg: DictConfig) -> str:
    """The progress bar's label: a sweep job's overrides, else the allocator's label."""
    try:
        job = HydraConfig.get().job.override_dirname
    except ValueError:
        job = ""
    return job or allocator_label(str(cfg.allocator.name), cfg.allocator.get("reserve"), hydra_choice())


class _Progress:
    def __init__(self, bar) -> None:
        self.bar = bar

    def update_to(self, finished: int) -> None:
        if finished != self.bar.n:
            self.bar.update(finished - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def _progress_bar(cfg: DictConfig, total: int, desc: str) -> _Progress | None:
    if not cfg.get("progress", True):
        return None
    from tqdm.auto import tqdm  # start-up time: only when a bar is shown

    return _Progress(tqdm(total=total, desc=desc, unit="req", delay=2.0, leave=False, file=sys.stderr))


SHOW_COLUMNS = ("allocator_label", "reserve", "granularity", "workload", "num_finished", "num_rejected",
                "mean_batch_size", "request_throughput", "normalized_latency_s", "mem_token_frac",
                "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac", "num_preemptions")


def format_table(rows: list[dict], columns=SHOW_COLUMNS) -> str:
    """One row per run; ``-`` where a column does not apply."""
    frame = pd.DataFrame(rows)
    cols = [c for c in columns if c in frame.columns]
    return frame[cols].astype(object).map(cell).to_string(index=False)
