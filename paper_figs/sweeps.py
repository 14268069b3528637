"""Shared drawing of sweep figures: one line per series against an x column, one panel per
value of a panel column, seeds averaged with an sd band, every line marked and dashed by
series so that coinciding lines stay visible, and a note on each panel a line leaves."""
from __future__ import annotations

import re
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paper_figs import common

CLIP_S_PER_TOKEN = 1.0
_DASHES = ["", (4, 2), (1, 1.5), (6, 2, 1, 2), (3, 1, 1, 1)]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def _natural(value) -> list:
    """Sort key: text in order, its numbers by value ("2 req/s" before "15 req/s")."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", str(value)))]


def lines(runs: pd.DataFrame, *, x: str, y: str, series: str, panel: str | None,
          panel_order: Sequence | None = None, panel_title=str, xlabel: str, ylabel: str,
          suptitle: str, clip: float | None = CLIP_S_PER_TOKEN, logx: bool = False) -> plt.Figure:
    """The figure (not saved). ``clip``: y limit; a panel where a line passes it says so."""
    runs = runs.copy()
    panels = list(panel_order) if panel_order is not None else (
        list(dict.fromkeys(runs[panel])) if panel else [None])
    panels = [p for p in panels if panel is None or (runs[panel] == p).any()]
    names = list(dict.fromkeys(runs[series]))  # in an order that does not hang on the runs' order
    names = common.label_order(names) if series == "label" else sorted(names, key=_natural)
    colors = common.palette(names) if series == "label" else dict(zip(names, common.sns.color_palette("colorblind", len(names))))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.3), squeeze=False)
    note_lines = 0
    for ax, value in zip(axes[0], panels):
        sub = runs if panel is None else runs[runs[panel] == value]
        clipped = []
        means = {str(n): sub[sub[series] == n].groupby(x)[y].mean() for n in names if (sub[series] == n).any()}
        for i, name in enumerate(names):
            g = sub[sub[series] == name].groupby(x)[y].agg(["mean", "std", "count"]).reset_index()
            if g.empty:
                continue
            ax.plot(g[x], g["mean"], marker=_MARKERS[i % len(_MARKERS)], dashes=_DASHES[i % len(_DASHES)],
                    color=colors[name], label=str(name), markersize=4, linewidth=1.4)
            if (g["count"] > 1).any():
                std = g["std"].fillna(0)
                ax.fill_between(g[x], g["mean"] - std, g["mean"] + std, color=colors[name], alpha=0.15)
            if clip is not None and (g["mean"] > clip).any():
                clipped.append(str(name))
        if clip is not None:
            top = np.nanmax(sub[y].to_numpy(dtype=float)) if len(sub) else clip
            ax.set_ylim(0, min(top * 1.05, clip))
        if clipped:
            ax.text(0.98, 0.03, "clipped (beyond the axis):\n" + "\n".join(clipped), transform=ax.transAxes,
                    va="bottom", ha="right", fontsize=6.5, color="0.3")
        notes = common.series_notes(means, clip, " s/token" if "s/token" in ylabel else "", x_name=xlabel.split(" (")[0])
        if notes:  # lines a reader would otherwise miss (above the axis throughout, or under another): below the axes
            ax.text(0.0, -0.34, "\n".join(notes), transform=ax.transAxes, va="top", ha="left", fontsize=6.5,
                    color="0.3").set_in_layout(False)  # the saved image grows to hold it; the axes keep their size
        note_lines = max(note_lines, len(notes))
        right = common.visible_right(means, clip) if clip is not None else None
        if right is not None and not logx:  # nothing drawn past the last rise out of the axes
            left = float(sub[x].min())
            ax.set_xlim(left - 0.03 * (right - left), right + 0.03 * (right - left))
        if logx:
            common.log2_axis(ax, sub[x].unique())
        ax.set_xlabel(xlabel)
        ax.set_title(panel_title(value) if panel else "", fontsize=9)
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    common.legend_above(fig, handles, labels)
    fig.suptitle(suptitle, fontsize=9, y=-0.02 - 0.05 * note_lines, va="top")
    return fig


def finite(runs: pd.DataFrame, *columns: str) -> pd.DataFrame:
    runs = common.numeric(runs, *columns)
    return runs[np.all(np.isfinite(runs[list(columns)].to_numpy(dtype=float)), axis=1)]


def knob_rate_figure(index_df: pd.DataFrame, out_dir, *, name: str, experiment: str, knob: str,
                     knob_title: str) -> list:
    """Normalized latency vs request rate, one panel per value of ``knob`` (n or beam width),
    one line per allocator (the paper's Figure 14 layout)."""
    runs = common.pick(index_df, name, experiment, need=["request_rate", "normalized_latency_s", knob])
    if runs is None:
        return []
    runs = finite(runs, "request_rate", "normalized_latency_s", knob)
    common.setup_style()
    model, data = runs["model"].iloc[0], common.workload_name(runs["workload"].iloc[0])
    fig = lines(runs, x="request_rate", y="normalized_latency_s", series="label", panel=knob,
                panel_order=sorted(runs[knob].unique()),
                panel_title=lambda v: f"{model}, {data}, {knob_title} {int(v)}",
                xlabel="request rate (req/s)", ylabel="normalized latency (s/token)",
                suptitle="simulated, system vllm-2023; Alpaca is the synthetic stand-in")
    return common.save(fig, out_dir, name)
