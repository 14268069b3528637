"""Preemptions and normalized latency against the KV budget, recompute vs swap.

x: ``kv_bytes`` in GB (``kv_slots`` when no run has kv_bytes); line style: the extra summary
column ``preemption`` (recompute | swap).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from paper_figs import common

NAME = "memory_pressure"
EXPERIMENT = "paper-pressure"
PANELS = (
    ("num_preemptions", "preemptions (count)"),
    ("normalized_latency_s", "normalized latency (s/token)"),
)


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT)
    if runs is None:
        return []
    runs = common.numeric(runs, "kv_bytes", "kv_slots", *(c for c, _ in PANELS))
    if runs["kv_bytes"].notna().any():
        runs["budget"], xlabel = runs["kv_bytes"] / 1e9, "KV cache budget (GB)"
    elif runs["kv_slots"].notna().any():
        runs["budget"], xlabel = runs["kv_slots"], "KV cache budget (token slots)"
    else:
        return common.skip(NAME, "no run has kv_bytes or kv_slots")
    common.setup_style()
    if "preemption" not in runs:
        runs["preemption"] = "unspecified"
    runs["preemption"] = runs["preemption"].astype(object).where(runs["preemption"].notna(), "unspecified")
    modes = sorted(runs["preemption"].unique(), key=lambda m: (m != "recompute", m != "swap", m))
    order = common.label_order(runs["label"])
    colors = common.palette(order)
    common.check_alike(NAME, runs, ["budget", "label", "preemption"])
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.8 * len(PANELS), 3.3))
    for i, (ax, (column, ylabel)) in enumerate(zip(axes, PANELS)):
        data = runs.dropna(subset=["budget", column])
        if data.empty:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.lineplot(data=data, x="budget", y=column, hue="label", hue_order=order,
                         palette=colors, style="preemption", style_order=modes, markers=True,
                         errorbar="sd", ax=ax, legend="brief" if i == 0 else False)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    if axes[0].get_legend() is not None:
        handles, labels = axes[0].get_legend_handles_labels()
        axes[0].get_legend().remove()
        labels = [{"label": "allocator", "preemption": "preemption"}.get(lab, lab) for lab in labels]
        common.legend_above(fig, handles, labels, ncol=len(labels))
    return common.save(fig, out_dir, NAME)
