"""Queue order x request rate (experiments ``policy-rate-*``): one row of panels per experiment
(ShareGPT, the Azure conversation trace, the paper's OPT-13B setting), one line per order.

x: request rate (the stream's mean rate). Panels: mean end-to-end latency, P99 end-to-end
latency, Jain's fairness index of normalized latency, P99 TTFT of the urgent class (priority 0).
Only runs that differ in nothing but the seed are averaged.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import common

NAME = "policy_rate"
EXPERIMENT = "policy-rate"
PANELS = (("mean_e2e_s", "mean E2E (s)", 1.0), ("p99_e2el_ms", "P99 E2E (s)", 1e-3),
          ("jain_fairness_normalized_latency", "Jain fairness (norm. latency)", 1.0),
          ("prio0_p99_ttft_s", "P99 TTFT, urgent class (s)", 1.0))
ORDERS = ("fcfs", "priority", "sjf", "lpm")
# lpm dashed over the others: without a prefix cache (paged) it coincides with fcfs
STYLE = {"fcfs": {"marker": "o", "linewidth": 3}, "priority": {"marker": "o"}, "sjf": {"marker": "o"},
         "lpm": {"marker": "x", "linestyle": "--"}}
COLORS = dict(zip(ORDERS, ("tab:blue", "tab:orange", "tab:green", "tab:red")))


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, prefix=experiment is None,
                       need=["policy", "request_rate", "mean_e2e_s"])
    if runs is None:
        return []
    keys = [key for key, _, _ in PANELS if key in runs.columns]
    runs = common.numeric(runs, "request_rate", *keys)
    experiments = sorted(runs["experiment"].unique())
    common.setup_style()
    fig, axes = plt.subplots(len(experiments), len(PANELS), figsize=(4 * len(PANELS), 3.2 * len(experiments)),
                             squeeze=False)
    for row, name in zip(axes, experiments):
        frame = runs[runs["experiment"] == name]
        means = common.mean_by(frame, ["policy", "request_rate"], keys)
        for policy in [p for p in ORDERS if p in set(means["policy"])]:
            line = means[means["policy"] == policy].sort_values("request_rate")
            for ax, (key, ylabel, scale) in zip(row, PANELS):
                if key in line.columns and line[key].notna().any():
                    ax.plot(line["request_rate"], scale * line[key], label=policy, color=COLORS[policy],
                            **STYLE.get(policy, {}))
                ax.set_ylabel(ylabel)
        for ax in row:
            ax.set_xlabel(f"request rate (req/s), {name}")
    common.legend_above(fig, *axes[0][0].get_legend_handles_labels())
    return common.save(fig, out_dir, NAME)
