"""Longest-prefix-match: cache gain against starvation (experiment ``lpm-starvation``), with
and without an aging bound, on a shared-prefix workload.

x: request rate. One line per order and aging bound (fcfs with a bound only counts who waited
past it: fcfs never reorders). Panels: prefix token hit rate (the gain), mean TTFT, the longest
queue wait (the starvation), requests queued past the bound (null without one: not drawn).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import common

NAME = "lpm_starvation"
EXPERIMENT = "lpm-starvation"
PANELS = (("prefix_token_hit_rate", "prefix token hit rate (%)", 100.0), ("mean_ttft_s", "mean TTFT (s)", 1.0),
          ("max_queue_wait_s", "longest queue wait (s)", 1.0),
          ("num_waited_over_bound", "requests waiting past the bound", 1.0))


def _label(row: pd.Series) -> str:
    bound = row.get("aging_bound_s")
    return f"{row['policy']}" + (f", aging {float(bound):g} s" if pd.notna(bound) else ", no aging")


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["policy", "request_rate", "max_queue_wait_s"])
    if runs is None:
        return []
    keys = [key for key, _, _ in PANELS if key in runs.columns]
    runs = common.numeric(runs, "request_rate", *keys)
    runs["order"] = runs.apply(_label, axis=1)
    means = common.mean_by(runs, ["order", "request_rate"], keys)
    common.setup_style()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    orders = sorted(means["order"].unique())
    colors = dict(zip(orders, plt.rcParams["axes.prop_cycle"].by_key()["color"]))  # one per line in every panel
    for order, line in means.groupby("order", sort=True):
        line = line.sort_values("request_rate")
        for ax, (key, ylabel, scale) in zip(axes, PANELS):
            if key in line.columns and line[key].notna().any():
                aged = "no aging" not in order  # dashed: may coincide with the same order unaged
                ax.plot(line["request_rate"], scale * line[key], marker="x" if aged else "o",
                        linestyle="--" if aged else "-", color=colors[order], label=order)
            ax.set_ylabel(ylabel)
    for ax in axes:
        ax.set_xlabel("request rate (req/s)")
    common.legend_above(fig, *axes[0].get_legend_handles_labels())
    return common.save(fig, out_dir, NAME)
