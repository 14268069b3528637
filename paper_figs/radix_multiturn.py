"""Radix tree vs hash-chained prefix cache vs block (page) size on multi-turn chat.

x: block size (log2); one line per cache. Panels: token hit rate (prompt tokens served from
the cache / prompt tokens bar the last, over every admit), cached share of the pool (reusable K/V no sequence owns, time
weighted), mean TTFT.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import beyond, common

NAME = "radix_multiturn"
EXPERIMENT = "radix-multiturn"
PANELS = (("prefix_token_hit_rate", "token hit rate (%)", 100.0), ("mem_cached_frac", "cached (% of KV pool)", 100.0),
          ("mean_ttft_s", "mean TTFT (s)", 1.0))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["prefix_token_hit_rate", "block_size"])
    if runs is None:
        return []
    runs = common.numeric(runs, "block_size", *(key for key, _, _ in PANELS))
    runs["label"] = runs.apply(beyond.label, axis=1)
    common.setup_style()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    common.check_alike(NAME, runs, ["label", "block_size"])
    for lab, frame in runs.groupby("label"):
        frame = frame.groupby("block_size").mean(numeric_only=True).sort_index()
        for ax, (key, ylabel, scale) in zip(axes, PANELS):
            ax.plot(frame.index, scale * frame[key], marker="o", label=lab)
            ax.set_ylabel(ylabel)
    for ax in axes:
        common.log2_axis(ax, runs["block_size"].dropna())
        ax.set_xlabel("block (page) size, tokens")
    common.legend_above(fig, *axes[0].get_legend_handles_labels())
    return common.save(fig, out_dir, NAME)
