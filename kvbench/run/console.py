"""What a run shows on the console: its progress bar and the one-row-per-run summary table."""
from __future__ import annotations

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from kvbench.results.naming import allocator_label, cell, hydra_choice
from kvbench.run.progress import RunProgress, wanted


def _job_label(cfg: DictConfig) -> str:
    """The progress bar's label: a sweep job's overrides, else the allocator's label."""
    try:
        job = HydraConfig.get().job.override_dirname
    except ValueError:
        job = ""
    return job or allocator_label(str(cfg.allocator.name), cfg.allocator.get("reserve"), hydra_choice())


def _progress_bar(cfg: DictConfig, total: int, desc: str) -> RunProgress | None:
    """The run's progress bar (``kvbench.run.progress``), or None: progress=false, no terminal, CI."""
    return RunProgress(total, desc) if wanted(cfg.get("progress", True)) else None


SHOW_COLUMNS = ("allocator_label", "reserve", "granularity", "workload", "num_finished", "num_rejected",
                "mean_batch_size", "request_throughput", "normalized_latency_s", "mem_token_frac",
                "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac", "num_preemptions")


def format_table(rows: list[dict], columns=SHOW_COLUMNS) -> str:
    """One row per run; ``-`` where a column does not apply."""
    frame = pd.DataFrame(rows)
    cols = [c for c in columns if c in frame.columns]
    return frame[cols].astype(object).map(cell).to_string(index=False)
