"""Figure 20: recompute vs swap across block sizes (normalized latency, paged allocator)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "preempt_block"
EXPERIMENT = "paper-preempt-block"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["normalized_latency_s", "block_size", "preemption"])
    if runs is None:
        return []
    runs = sweeps.finite(runs, "normalized_latency_s", "block_size")
    common.setup_style()
    r = runs.iloc[0]
    fig = sweeps.lines(runs, x="block_size", y="normalized_latency_s", series="preemption", panel="model",
                       panel_title=lambda v: f"{v}, {common.workload_name(r['workload'])} {r['request_rate']:g} req/s",
                       xlabel="block size (tokens)", ylabel="normalized latency (s/token)",
                       suptitle="paged allocator; preemptions per run in the index (num_preemptions)", logx=True)
    return common.save(fig, out_dir, NAME)
