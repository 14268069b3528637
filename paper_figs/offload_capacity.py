"""KV tiers: host capacity x eviction policy (experiments ``offload-*``): one row of panels per
experiment (the Mooncake conversation and synthetic traces, ShareGPT multi-turn), one line per
host-tier policy.

x: the host tier in multiples of the GPU's KV bytes (0 = the GPU alone, the same run on every
line), placed evenly. Panels:
total token hit rate (GPU + host; the trace's reuse ceiling dashed where the trace has one), the
host tier's share of it, mean and P99 TTFT, request throughput. Only runs that differ in nothing
but the seed are averaged.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import common

NAME = "offload_capacity"
EXPERIMENT = "offload-"
PANELS = (("tier_hit_rate_total", "total token hit rate (%)", 100.0),
          ("tier_hit_rate_host", "hit rate from the host (%)", 100.0),
          ("mean_ttft_s", "mean TTFT (s)", 1.0), ("p99_ttft_s", "P99 TTFT (s)", 1.0),
          ("request_throughput", "throughput (req/s)", 1.0))
POLICIES = ("lru", "arc", "lfu", "slru")
COLORS = dict(zip(POLICIES, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
# lru wide and under the others: where policies coincide (a small host tier) the rest stay visible
STYLE = {"lru": {"marker": "o", "linewidth": 3.5, "alpha": 0.6}, "arc": {"marker": "s"},
         "lfu": {"marker": "^"}, "slru": {"marker": "x", "linestyle": "--"}}


def _gpu_alone_for_every_policy(runs: pd.DataFrame) -> pd.DataFrame:
    """x = 0 is the GPU alone: no tier, so no policy (null in its summary). A sweep runs it once per
    policy, alike in all but a setting with nothing to order: one of them (per experiment and
    seed) starts every policy's line."""
    alone = runs["offload_host_bytes"] == 0
    first = runs[alone].drop_duplicates(subset=["experiment", "seed"])
    policies = [p for p in POLICIES if p in set(runs.loc[~alone, "offload_policy"].dropna())] or ["lru"]
    copies = [first.assign(offload_policy=policy) for policy in policies]
    return pd.concat([runs[~alone], *copies], ignore_index=True)


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, prefix=experiment is None,
                       need=["offload_host_bytes", "kv_bytes", "tier_hit_rate_total"])
    if runs is None:
        return []
    keys = [key for key, _, _ in PANELS if key in runs.columns]
    runs = common.numeric(runs, "offload_host_bytes", "kv_bytes", *keys)
    runs = _gpu_alone_for_every_policy(runs.assign(
        host_multiple=(runs["offload_host_bytes"] / runs["kv_bytes"]).round(2)))
    has_ceiling = "trace_reuse_ceiling" in runs.columns
    experiments = sorted(runs["experiment"].unique())
    common.setup_style()
    fig, axes = plt.subplots(len(experiments), len(PANELS), figsize=(3.6 * len(PANELS), 3.0 * len(experiments)),
                             squeeze=False)
    for row, name in zip(axes, experiments):
        frame = runs[runs["experiment"] == name]
        means = common.mean_by(frame, ["offload_policy", "host_multiple"], keys, figure=NAME)
        multiples = sorted(means["host_multiple"].unique())
        place = {m: i for i, m in enumerate(multiples)}
        for policy in [p for p in POLICIES if p in set(means["offload_policy"])]:
            line = means[means["offload_policy"] == policy].sort_values("host_multiple")
            x = line["host_multiple"].map(place)
            for ax, (key, ylabel, scale) in zip(row, PANELS):
                if key in line.columns and line[key].notna().any():
                    ax.plot(x, scale * line[key], label=policy, color=COLORS[policy], **STYLE[policy])
                ax.set_ylabel(ylabel)
        if has_ceiling:
            ceiling = pd.to_numeric(frame["trace_reuse_ceiling"], errors="coerce").dropna()
            if not ceiling.empty:
                row[0].axhline(100.0 * ceiling.iloc[0], color="black", linestyle=":", label="trace ceiling")
        for ax in row:
            ax.set_xticks(range(len(multiples)), [f"{m:g}" for m in multiples])
            ax.set_xlabel(f"host / GPU KV bytes, {name}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes[1:]:
        for handle, label in zip(*row[0].get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    common.legend_above(fig, handles, labels)
    return common.save(fig, out_dir, NAME)
