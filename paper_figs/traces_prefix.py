"""Prefix caching on the Mooncake conversation trace: measured hit rate against the trace's own
ceiling, throughput and mean TTFT, by block size, for three KV pool sizes.

x: block (page) size in tokens (log 2). One colour per pool size; solid = hash-chained cache
(paged_prefix), dashed = radix tree, dotted horizontal = no cache (paged, block 16) where run.
Left panel's grey line: the ceiling (the share of prompt tokens an infinite cache would hit).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import common

NAME = "traces_prefix"
EXPERIMENT = "traces-mooncake-prefix"
STYLE = {"paged_prefix": "-", "radix": "--"}
METRICS = (("prefix_token_hit_rate", "prompt tokens hit (%)", 100.0), ("request_throughput", "throughput (req/s)", 1.0),
           ("mean_ttft_s", "mean TTFT (s)", 1.0))


def pool_label(pool_gib: float) -> str:
    return f"{pool_gib:.0f} GiB pool"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["block_size", "kv_bytes"])
    if runs is None:
        return []
    runs = common.numeric(runs, "block_size", "kv_bytes", "trace_reuse_ceiling", *(m for m, _, _ in METRICS))
    # a pool of whole blocks: the same configured bytes hold a few slots less at larger blocks
    runs["pool_gib"] = (runs["kv_bytes"] / 2**30).round()
    common.setup_style()
    pools = sorted(runs["pool_gib"].unique())
    colors = dict(zip(pools, common.sns.color_palette("viridis", len(pools))))
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.6 * len(METRICS), 3.8))
    for ax, (metric, ylabel, scale) in zip(axes, METRICS):
        for pool in pools:
            at_pool = runs[runs["pool_gib"] == pool]
            for allocator, style in STYLE.items():
                line = at_pool[at_pool["allocator"] == allocator].groupby("block_size")[metric].mean().sort_index()
                if not line.empty:
                    ax.plot(line.index, scale * line.to_numpy(), ls=style, marker="o", ms=3.5, color=colors[pool],
                            label=f"{allocator}, {pool_label(pool)}")
            plain = at_pool[at_pool["allocator"] == "paged"][metric].mean()
            if metric != "prefix_token_hit_rate" and plain == plain:
                ax.axhline(scale * plain, ls=":", color=colors[pool], lw=1)
        if metric == "prefix_token_hit_rate":
            ceiling = runs["trace_reuse_ceiling"].mean()
            ax.axhline(100 * ceiling, color="0.4", lw=1.2, label=f"trace ceiling {100 * ceiling:.1f}%")
        if metric == "mean_ttft_s":
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel(ylabel)
    handles, names = axes[0].get_legend_handles_labels()
    common.legend_above(fig, handles, names, ncol=4)
    return common.save(fig, out_dir, NAME)
