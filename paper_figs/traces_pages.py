"""vAttention's page sizes on long prompts (arXiv summarization, Mooncake conversation) against
paged blocks of 16: internal waste (the unfilled tail of every request's last page) and the
mean batch size, per workload.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paper_figs import beyond, common

NAME = "traces_pages"
EXPERIMENT = "traces-long-prompts"
METRICS = (("mem_internal_frac", "internal waste (% of KV)", 100.0), ("mean_batch_size", "mean batch size", 1.0))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["mem_internal_frac", "mean_batch_size"])
    if runs is None:
        return []
    runs = common.numeric(runs, "page_bytes", "mean_prompt_len", *(m for m, _, _ in METRICS))
    runs["label"] = runs.apply(beyond.label, axis=1)
    runs["order"] = runs["page_bytes"].fillna(0)
    common.setup_style()
    workloads = sorted(runs["workload"].unique())
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5.2 * len(METRICS), 3.8))
    width = 0.8 / len(workloads)
    labels = runs.sort_values("order").drop_duplicates("label")["label"].tolist()
    x = np.arange(len(labels))
    for ax, (metric, ylabel, scale) in zip(axes, METRICS):
        for k, wl in enumerate(workloads):
            common.check_alike(NAME, runs[runs["workload"] == wl], ["label"])
            frame = runs[runs["workload"] == wl].groupby("label")[metric].mean()
            values = [scale * frame.get(lab, np.nan) for lab in labels]
            prompt = runs[runs["workload"] == wl]["mean_prompt_len"].mean()
            ax.bar(x + (k - (len(workloads) - 1) / 2) * width, values, width=width,
                   label=f"{wl} (mean prompt {prompt:,.0f})")
        ax.set_xticks(x, labels, rotation=25, ha="right")
        ax.set_ylabel(ylabel)
    handles, names = axes[0].get_legend_handles_labels()
    common.legend_above(fig, handles, names, ncol=2)
    return common.save(fig, out_dir, NAME)
