"""Where a generated token's time goes: attention vs matrix products vs the rest (backend hf).

From each run's steps: attention (``attention_s``), matrix products and the rest of the forward
pass (``forward_s``, which the executors time apart from attention), sampling (``sampling_s``),
KV copies and swaps (``copy_s + swap_s``), scheduling and bookkeeping (``schedule_s``), and the
step time no executor timer covers (``step_s`` minus the executor parts, at least 0). Each is
summed over the run and divided by its generated tokens (requests' output_len * n). Top row:
milliseconds per token; bottom row: shares. One column per device.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from paper_figs import common

NAME = "token_time"
EXPERIMENT = "paper-token-time"
PARTS = {  # name: step columns summed into it
    "attention": ("attention_s",),
    "matmul + rest of forward": ("forward_s",),
    "sampling": ("sampling_s",),
    "copy + swap": ("copy_s", "swap_s"),
    "scheduling": ("schedule_s",),
}
EXECUTOR_COLUMNS = ("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s")
UNTIMED = "untimed step time"


def split(steps: pd.DataFrame, tokens: float) -> dict[str, float]:
    """Seconds per generated token of each part (see the module docstring)."""
    def total(col: str) -> float:
        return float(np.nansum(steps[col].to_numpy(float))) if col in steps else 0.0

    out = {name: sum(total(c) for c in cols) / tokens for name, cols in PARTS.items()}
    timed = sum(total(c) for c in EXECUTOR_COLUMNS)
    out[UNTIMED] = max(total("step_s") - timed, 0.0) / tokens
    return out


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT)
    if runs is None:
        return []
    hf = runs[runs["backend"] == "hf"]
    if hf.empty:
        common.note(NAME, "no hf runs; drawing the experiment's other runs")
    else:
        runs = hf
    rows = []
    for _, run in runs.iterrows():
        try:
            steps = common.read_steps(run, results_root)
            tokens = common.generated_tokens(common.read_requests(run, results_root))
        except (OSError, ValueError) as err:
            common.note(NAME, f"run {run['run_id']}: cannot read its steps ({err}); left out")
            continue
        if tokens <= 0 or "step_s" not in steps:
            continue
        device = "?" if pd.isna(run["device"]) else str(run["device"])
        rows.append({"label": run["label"], "device": device, **split(steps, tokens)})
    if not rows:
        return common.skip(NAME, "no run has steps with timings and generated tokens")
    common.setup_style()
    parts = [*PARTS, UNTIMED]
    means = pd.DataFrame(rows).groupby(["device", "label"], sort=False)[parts].mean().reset_index()
    devices = sorted(means["device"].unique())
    colors = dict(zip(parts, sns.color_palette("colorblind")[:4] + [(0.55, 0.55, 0.55), (0.85, 0.85, 0.85)]))
    order = common.label_order(means["label"])
    width = max(4.5, 0.7 * len(order) + 1.0)
    fig, axes = plt.subplots(2, len(devices), figsize=(width * len(devices), 6.0), squeeze=False,
                             sharex="col")
    for col, device in enumerate(devices):
        frame = means[means["device"] == device].set_index("label")
        labels = [lab for lab in order if lab in frame.index]
        x = np.arange(len(labels))
        values = frame.loc[labels, parts]
        for ax, table, ylabel in (
            (axes[0][col], values * 1e3, "time per generated token (ms)"),
            (axes[1][col], values.div(values.sum(axis=1), axis=0) * 100, "share of token time (%)"),
        ):
            bottom = np.zeros(len(labels))
            for part in parts:
                ax.bar(x, table[part].to_numpy(), bottom=bottom, width=0.7, color=colors[part],
                       edgecolor="0.35", linewidth=0.5, label=part)
                bottom += table[part].to_numpy()
            ax.grid(axis="x", visible=False)
            if col == 0:
                ax.set_ylabel(ylabel)
        axes[0][col].set_title(f"device: {device}")
        axes[1][col].set_ylim(0, 100)
        axes[1][col].set_xticks(x, labels, rotation=25, ha="right")
        axes[1][col].set_xlabel("allocator (block size)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    common.legend_above(fig, handles, labels, ncol=3)
    return common.save(fig, out_dir, NAME)
