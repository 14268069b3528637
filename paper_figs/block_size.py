"""Block-size sweep (log2 x axis): tail waste, attention time per token, throughput.

Attention time per generated token is the summary's extra ``attention_s_per_token`` when a run
has it, else the run's total ``attention_s`` over its steps divided by its generated tokens
(requests' output_len * n).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from paper_figs import common

NAME = "block_size"
EXPERIMENT = "paper-block-size"
PANELS = (  # column, axis label, scale
    ("tail_waste_pct", "tail waste (% of KV slots)", 100.0),
    ("attention_ms_per_token", "attention time (ms / generated token)", 1e3),
    ("request_throughput", "throughput (req/s)", 1.0),
)


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["block_size"])
    if runs is None:
        return []
    common.setup_style()
    runs = common.numeric(runs, "block_size", "mem_internal_frac", "request_throughput")
    runs["tail_waste_pct"] = runs["mem_internal_frac"]
    runs["attention_ms_per_token"] = [
        common.time_per_token(row, results_root, "attention_s") for _, row in runs.iterrows()
    ]
    order = common.label_order(runs["family"])
    colors = common.palette(order)
    several_workloads = runs["workload"].nunique() > 1
    common.check_alike(NAME, runs, ["block_size", "family", "workload"])
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.5 * len(PANELS), 3.3))
    for ax, (column, ylabel, scale) in zip(axes, PANELS):
        data = runs.assign(value=runs[column] * scale).dropna(subset=["value"])
        if data.empty:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.lineplot(data=data, x="block_size", y="value", hue="family", hue_order=order,
                         palette=colors, style="workload" if several_workloads else None,
                         marker="o", errorbar="sd", ax=ax, legend=False)
        common.log2_axis(ax, runs["block_size"].dropna())
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    handles = [plt.Line2D([], [], color=colors[lab], marker="o") for lab in order]
    common.legend_above(fig, handles, order)
    return common.save(fig, out_dir, NAME)
