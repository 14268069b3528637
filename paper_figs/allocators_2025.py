"""Every allocator, 2023 and after, on three workloads at the same pool and rate.

Rows: the five-way memory breakdown (time-weighted; ``cached`` = reusable prefix K/V no
sequence owns, external in the paper's four-way view), mean batch size, request throughput,
mean TTFT (log scale); columns: ShareGPT single turn, multi-turn chat, shared system prompts. The prefix
hit rate is printed on the caching allocators' batch-size bars.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paper_figs import beyond, common

NAME = "allocators_2025"
EXPERIMENT = "allocators-2025"
ORDER = ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "paged", "paged+prefix", "radix")
METRICS = (("mean_batch_size", "mean batch size"), ("request_throughput", "throughput (req/s)"),
           ("mean_ttft_s", "mean TTFT (s)"))


# Allocator bars take no colour of a memory category (green token, yellow reserved, vermillion
# internal, light grey external, light blue cached), so a bar never reads as a category.
BAR_COLORS: dict[str, tuple] = {
    "Orca (Max)": (0.45, 0.22, 0.42), "Orca (Pow2)": (0.65, 0.38, 0.62), "Orca (Oracle)": (0.84, 0.62, 0.81),
    "paged": (0.0, 0.35, 0.60), "paged+prefix": (0.62, 0.45, 0.28), "radix": (0.30, 0.30, 0.30),
    "vAttention (2 MiB)": (0.10, 0.12, 0.35),
}


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    need = ["mem_token_frac", "mean_batch_size", "request_throughput"]
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=need)
    if runs is None:
        return []
    common.setup_style()
    runs = beyond.five_way(runs)
    runs = common.numeric(runs, "mean_batch_size", "request_throughput", "mean_ttft_s", "prefix_hit_rate")
    runs["label"] = runs.apply(beyond.label, axis=1)
    runs["wl"] = runs["workload"].map(beyond.workload_key)
    workloads = [w for w in beyond.WORKLOAD_ORDER if w in set(runs["wl"])] + \
        sorted(set(runs["wl"]) - set(beyond.WORKLOAD_ORDER))
    labels = [lab for lab in ORDER if lab in set(runs["label"])] + \
        sorted(set(runs["label"]) - set(ORDER))
    colors = {lab: BAR_COLORS.get(lab, (0.5, 0.5, 0.5)) for lab in labels}
    fig, axes = plt.subplots(1 + len(METRICS), len(workloads), figsize=(4.2 * len(workloads), 11),
                             squeeze=False, sharey="row")
    for col, wl in enumerate(workloads):
        common.check_alike(NAME, runs[runs["wl"] == wl], ["label"])
        frame = runs[runs["wl"] == wl].groupby("label").mean(numeric_only=True)
        present = [lab for lab in labels if lab in frame.index]
        x = np.arange(len(present))
        ax = axes[0][col]
        bottom = np.zeros(len(present))
        for category, column in beyond.COLUMNS5.items():
            share = 100 * frame.loc[present, column].to_numpy()
            ax.bar(x, share, bottom=bottom, width=0.7, color=beyond.COLORS5[category], edgecolor="0.35",
                   linewidth=0.5)
            bottom += share
        ax.set_title(beyond.WORKLOAD_NAMES.get(wl, wl))
        ax.set_ylim(0, 100)
        for row, (metric, ylabel) in enumerate(METRICS, start=1):
            ax = axes[row][col]
            values = frame.loc[present, metric].to_numpy()
            ax.bar(x, values, width=0.7, color=[colors[lab] for lab in present], edgecolor="0.35", linewidth=0.5)
            if metric == "mean_batch_size":
                for xi, lab in zip(x, present):
                    hit = frame.loc[lab, "prefix_hit_rate"]
                    if hit == hit:  # not NaN: a caching allocator
                        ax.text(xi, values[list(present).index(lab)], f"hit\n{100 * hit:.0f}%",
                                ha="center", va="bottom", fontsize=7)
            if metric == "mean_ttft_s":
                ax.set_yscale("log")  # Orca (Max) waits minutes, the caches tens of milliseconds
            if col == 0:
                ax.set_ylabel(ylabel)
        for ax in axes[:, col]:
            ax.set_xticks(x, present if ax is axes[-1][col] else [""] * len(present), rotation=35, ha="right")
            ax.grid(axis="x", visible=False)
    axes[0][0].set_ylabel("share of KV slots (%)")
    common.legend_above(fig, beyond.handles5(), list(beyond.CATEGORIES5))
    return common.save(fig, out_dir, NAME)
