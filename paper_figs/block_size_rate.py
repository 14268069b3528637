"""Figure 19: normalized latency vs block size on ShareGPT and Alpaca, one line per rate."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "block_size_rate"
EXPERIMENT = "paper-block-rate"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["request_rate", "normalized_latency_s", "block_size"])
    if runs is None:
        return []
    runs = sweeps.finite(runs, "request_rate", "normalized_latency_s", "block_size")
    runs["dataset"] = runs["workload"].map(common.workload_name)
    runs["rate"] = runs["request_rate"].map(lambda r: f"{r:g} req/s")
    common.setup_style()
    paths: list[Path] = []
    model = runs["model"].iloc[0]
    fig = sweeps.lines(runs.sort_values("request_rate"), x="block_size", y="normalized_latency_s", series="rate",
                       panel="dataset", panel_order=["ShareGPT", "Alpaca"],
                       panel_title=lambda v: f"{model}, {v}{' (synthetic)' if v == 'Alpaca' else ''}, paged",
                       xlabel="block size (tokens)", ylabel="normalized latency (s/token)",
                       suptitle="one line per request rate", logx=True)
    paths += common.save(fig, out_dir, NAME)
    return paths
