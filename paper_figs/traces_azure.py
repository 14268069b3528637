"""Every allocator on the Azure 2023 traces (conversation, code) from the trace's own rate up.

Columns: the two traces. Top row: the five-way memory breakdown at the highest rate
(time-weighted). Then, against the replayed mean rate (the trace's arrival gaps scaled, burst
shape kept): mean batch size, goodput under the experiment's SLO, p99 TTFT (log) and preemptions.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter
import numpy as np
import pandas as pd

from paper_figs import beyond, common

NAME = "traces_azure"
EXPERIMENT = "traces-azure"
ORDER = ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "paged", "paged+prefix", "radix", "vAttention (2 MiB)")
WORKLOADS = {"azure_conv": "Azure 2023 conversation", "azure_code": "Azure 2023 code"}
METRICS = (("mean_batch_size", "mean batch size", False), ("request_goodput", "goodput (req/s)", False),
           ("p99_ttft_s", "p99 TTFT (s)", True), ("num_preemptions", "preemptions", False))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["mean_batch_size", "request_rate"])
    if runs is None:
        return []
    common.setup_style()
    runs = beyond.five_way(runs)
    runs = common.numeric(runs, "request_rate", *(m for m, _, _ in METRICS))
    runs["label"] = runs.apply(beyond.label, axis=1)
    workloads = [w for w in WORKLOADS if w in set(runs["workload"])]
    labels = [lab for lab in ORDER if lab in set(runs["label"])] + sorted(set(runs["label"]) - set(ORDER))
    colors = dict(zip(labels, common.sns.color_palette("colorblind", len(labels))))
    fig, axes = plt.subplots(1 + len(METRICS), len(workloads), figsize=(5.2 * len(workloads), 14), squeeze=False)
    for col, wl in enumerate(workloads):
        frame = runs[runs["workload"] == wl]
        top = frame[frame["request_rate"] == frame["request_rate"].max()].groupby("label").mean(numeric_only=True)
        present = [lab for lab in labels if lab in top.index]
        x = np.arange(len(present))
        ax, bottom = axes[0][col], np.zeros(len(present))
        for category, column in beyond.COLUMNS5.items():
            share = 100 * top.loc[present, column].to_numpy()
            ax.bar(x, share, bottom=bottom, width=0.7, color=beyond.COLORS5[category], edgecolor="0.35", linewidth=0.5)
            bottom += share
        ax.set_xticks(x, present, rotation=35, ha="right")
        ax.set_ylim(0, 100)
        ax.set_title(f"{WORKLOADS[wl]}\nmemory at {frame['request_rate'].max():.0f} req/s")
        for row, (metric, ylabel, log) in enumerate(METRICS, start=1):
            ax = axes[row][col]
            for lab in labels:
                line = frame[frame["label"] == lab].groupby("request_rate")[metric].mean().sort_index()
                if not line.empty:
                    ax.plot(line.index, line.to_numpy(), marker="o", ms=3.5, color=colors[lab], label=lab)
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            if log:
                ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            if row == len(METRICS):
                ax.set_xlabel("replayed mean rate (req/s, log)")
    axes[0][0].set_ylabel("share of KV slots (%)")
    handles, names = axes[1][0].get_legend_handles_labels()
    common.legend_above(fig, beyond.handles5() + handles, list(beyond.CATEGORIES5) + names, ncol=6)
    return common.save(fig, out_dir, NAME)
