"""KV memory breakdown per allocator: token / reserved / internal / external, stacked bars.

Reads the summary's mem_*_frac columns (time-weighted means over the run). One panel per
workload when the runs cover several; repeated runs (seeds) are averaged.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paper_figs import common

NAME = "memory_breakdown"
EXPERIMENT = "paper-batch"  # the paper's rates; paper-sat (saturation) adds panels when present
SATURATION = "paper-sat"


MAX_COLUMNS = 3


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    columns = list(common.CATEGORY_COLUMNS.values())
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=columns, fallback_any=True)
    if runs is None:
        return []
    names = index_df["experiment"].astype("string") if "experiment" in index_df else None
    if experiment is None and names is not None and (names == SATURATION).any():
        runs = pd.concat([runs, common.pick(index_df, NAME, SATURATION, need=columns)], ignore_index=True)
    saturated = runs["experiment"].astype(str) == SATURATION
    runs["workload"] = [f"{common.workload_name(w)}{' (synthetic)' if str(w).startswith('alpaca-syn') else ''}, "
                        f"{r:g} req/s{' (saturation)' if sat else ''}"
                        for w, r, sat in zip(runs["workload"], runs["request_rate"], saturated)]
    common.setup_style()
    if "mem_cached_frac" in runs:  # the paper's four-way view: cached prefix K/V counts as external
        cached = pd.to_numeric(runs["mem_cached_frac"], errors="coerce").fillna(0.0)
        runs["mem_external_frac"] = pd.to_numeric(runs["mem_external_frac"], errors="coerce") + cached
    runs = common.name_unlike(NAME, runs, ["workload", "label"], "workload")
    means = common.mean_by(runs, ["workload", "label"], columns, NAME)
    workloads = list(dict.fromkeys(means["workload"]))
    order = common.label_order(means["label"])
    width = max(3.2, 0.75 * len(order) + 1.2)
    nrows = -(-len(workloads) // MAX_COLUMNS)  # wrap into rows: a page-wide figure, not a strip
    ncols = -(-len(workloads) // nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 3.9 * nrows), sharey=True, squeeze=False)
    for ax in axes.flat[len(workloads):]:
        ax.set_visible(False)
    for ax, workload in zip(axes.flat, workloads):
        frame = means[means["workload"] == workload].set_index("label")
        labels = [lab for lab in order if lab in frame.index]
        x = np.arange(len(labels))
        bottom = np.zeros(len(labels))
        for category, column in common.CATEGORY_COLUMNS.items():
            share = 100 * frame.loc[labels, column].to_numpy()
            ax.bar(x, share, bottom=bottom, width=0.7, color=common.CATEGORY_COLORS[category],
                   edgecolor="0.35", linewidth=0.5, label=category)
            if category == "token":  # the useful share, printed on its bar
                for xi, value in zip(x, share):
                    ax.text(xi, value / 2, f"{value:.0f}%", ha="center", va="center", fontsize=8)
            bottom += share
        ax.set_xticks(x, labels, rotation=25, ha="right")
        ax.set_xlabel("allocator" if ax in axes[-1] or len(workloads) <= ncols else "")
        ax.set_ylim(0, 100)
        ax.grid(axis="x", visible=False)
        if len(workloads) > 1:
            ax.set_title(f"{runs['model'].iloc[0]}, {workload}", fontsize=9)
    for row in axes:
        row[0].set_ylabel("share of KV cache slots (%)")
    common.legend_above(fig, common.category_handles(), list(common.CATEGORIES))
    fig.suptitle("external includes cached prefix K/V no live request owns (the paper's four categories)",
                 fontsize=8, y=-0.01, va="top")
    return common.save(fig, out_dir, NAME)
