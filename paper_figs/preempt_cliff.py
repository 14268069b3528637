"""The preemption cliff (experiment ``preempt-cliff``): KV budget x victim choice, recompute and
swap, at a fixed overload.

x: KV cache budget (GB). One colour per victim choice; solid recompute, dashed swap. Panels: computed tokens
lost to preemption (recompute only; swap keeps them), preemptions, mean end-to-end latency.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import common

NAME = "preempt_cliff"
EXPERIMENT = "preempt-cliff"
PANELS = (("preempt_lost_tokens", "computed tokens lost", 1.0), ("num_preemptions", "preemptions", 1.0),
          ("mean_e2e_s", "mean E2E (s)", 1.0))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT,
                       need=["preemption_victim", "preemption", "kv_bytes", "preempt_lost_tokens"])
    if runs is None:
        return []
    keys = [key for key, _, _ in PANELS]
    runs = common.numeric(runs, "kv_bytes", *keys)
    means = common.mean_by(runs, ["preemption_victim", "preemption", "kv_bytes"], keys)
    common.setup_style()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    victims = sorted(means["preemption_victim"].unique())
    colors = dict(zip(victims, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for (victim, mode), line in means.groupby(["preemption_victim", "preemption"], sort=True):
        line = line.sort_values("kv_bytes")
        for ax, (key, ylabel, scale) in zip(axes, PANELS):
            ax.plot(line["kv_bytes"] / 1e9, scale * line[key], marker="o" if mode == "recompute" else "s",
                    linestyle="-" if mode == "recompute" else "--", color=colors[victim], label=f"{victim} ({mode})")
            ax.set_ylabel(ylabel)
    for ax in axes:
        ax.set_xlabel("KV cache budget (GB)")
    common.legend_above(fig, *axes[0].get_legend_handles_labels(), ncol=4)
    return common.save(fig, out_dir, NAME)
