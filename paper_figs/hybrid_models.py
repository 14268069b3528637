"""Mixed models (sliding window, linear attention) per allocator: useful memory, batch, throughput.

Rows: workload (Mooncake conversation, ShareGPT); columns: the pool's bytes that some layer
still reads (``mem_needed_frac``: Jenga's memory utilization; held but unread memory is the
waste), mean running requests, output tokens/s. Bars: allocator, grouped by model. Reads the
``hybrid-study`` runs (``conf/experiment/hybrid-study-*.yaml``).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paper_figs import common

NAME = "hybrid_models"
EXPERIMENT = "hybrid-study"
ALLOCATORS = ("uniform", "hybrid_static", "hybrid", "lcm")
MODELS = ("gemma-3-27b", "gpt-oss-120b", "qwen3-next-80b-a3b")
WORKLOADS = (("mooncake", "Mooncake conversation"), ("sharegpt", "ShareGPT"))
PANELS = (("mem_needed_frac", "KV some layer reads (% of pool)", 100.0),
          ("mean_running_requests", "mean running requests", 1.0),
          ("output_token_throughput", "output tokens/s", 1.0))
COLORS = dict(zip(ALLOCATORS, plt.get_cmap("tab10").colors[:4]))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["mem_needed_frac", "model"])
    if runs is None:
        return []
    runs = common.numeric(runs, *(key for key, _, _ in PANELS))
    runs["wl"] = runs["workload"].map(lambda w: next((k for k, _ in WORKLOADS if str(w).startswith(k)), None))
    runs = runs[runs["allocator"].isin(ALLOCATORS) & runs["model"].isin(MODELS) & runs["wl"].notna()]
    common.check_alike(NAME, runs, ["wl", "model", "allocator"])
    common.setup_style()
    fig, axes = plt.subplots(len(WORKLOADS), len(PANELS), figsize=(4.2 * len(PANELS), 3.0 * len(WORKLOADS)),
                             squeeze=False)
    width = 0.8 / len(ALLOCATORS)
    x = np.arange(len(MODELS))
    for row, (wl, title) in enumerate(WORKLOADS):
        part = runs[runs["wl"] == wl].groupby(["model", "allocator"]).mean(numeric_only=True)
        for col, (key, ylabel, scale) in enumerate(PANELS):
            ax = axes[row][col]
            for i, alloc in enumerate(ALLOCATORS):
                values = [scale * part[key].get((m, alloc), np.nan) for m in MODELS]
                ax.bar(x + (i - 1.5) * width, values, width, color=COLORS[alloc], label=alloc)
            ax.set_xticks(x, [m.replace("-80b-a3b", "-80B") for m in MODELS], fontsize=8)
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=9)
    common.legend_above(fig, *axes[0][0].get_legend_handles_labels(), ncol=len(ALLOCATORS))
    return common.save(fig, out_dir, NAME)
