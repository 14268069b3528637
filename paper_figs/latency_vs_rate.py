"""Normalized latency (s/token) against request rate, one line per allocator.

Runs of every experiment whose name starts with ``paper-rate``; one panel per workload
(columns; the length-matched ShareGPT stream is left out, said in a note: it is another stream) and model (rows) when there are several. Burst runs (infinite rate) are left out.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns

from paper_figs import common

NAME = "latency_vs_rate"


def _packaged_only(runs: pd.DataFrame) -> pd.DataFrame:
    """The length-matched ShareGPT stream (``*-matched``) is another request stream: averaged with the
    packaged one it would blend two streams into one line; it is left out here (the headline table
    reports it) and the figure says so."""
    matched = runs["workload"].astype(str).str.endswith("-matched")
    if matched.any():
        common.note(NAME, f"left out {int(matched.sum())} runs of the length-matched stream "
                          f"({', '.join(sorted(set(runs.loc[matched, 'experiment'].astype(str))))}; see the headline table)")
    return runs[~matched]
EXPERIMENT = "paper-rate-opt"  # a prefix: paper-rate-opt13b-sharegpt, ...


CLIP_S_PER_TOKEN = 1.0


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, prefix=True,
                       need=["request_rate", "normalized_latency_s"])
    if runs is None:
        return []
    runs = common.numeric(runs, "request_rate", "normalized_latency_s")
    runs = runs[np.isfinite(runs["request_rate"])]
    if runs.empty:
        return common.skip(NAME, "no runs with a finite request rate")
    common.setup_style()
    runs = _packaged_only(runs)
    runs["dataset"] = runs["workload"].map(common.workload_name)
    order = common.label_order(runs["label"])
    col = "dataset" if runs["dataset"].nunique() > 1 else None
    row = "model" if runs["model"].nunique() > 1 else None
    sizes = {"opt-13b": 13, "opt-66b": 66, "opt-175b": 175}
    row_order = sorted(runs["model"].unique(), key=lambda m: sizes.get(m, 999)) if row else None
    common.check_alike(NAME, runs, ["request_rate", "label", "dataset", "model"])
    grid = sns.relplot(
        data=runs, kind="line", x="request_rate", y="normalized_latency_s",
        hue="label", hue_order=order, palette=common.palette(order), style="label",
        style_order=order, markers=True, dashes=False, errorbar="sd",
        col=col, row=row, row_order=row_order, height=3.2, aspect=1.25,
        facet_kws={"sharey": False, "sharex": False},
    )  # fmt: skip
    grid.set_axis_labels("request rate (req/s)", "normalized latency (s/token)")
    grid.set_titles(row_template="{row_name}", col_template="{col_name}")
    if not (col or row):
        grid.set_titles("")
    for ax in grid.axes.flat:  # past saturation latency grows without bound: clip at 1 s/token as the paper does
        top = max((line.get_ydata().max() for line in ax.get_lines() if len(line.get_ydata())), default=1.0)
        ax.set_ylim(0, min(top * 1.05, CLIP_S_PER_TOKEN))
        if top > CLIP_S_PER_TOKEN:
            ax.text(0.02, 0.97, f"clipped at {CLIP_S_PER_TOKEN:g} s/token", transform=ax.transAxes,
                    va="top", fontsize=7, color="0.3")
    for key, ax in grid.axes_dict.items():  # say what a reader cannot see; no axis past the last rise
        keys = key if isinstance(key, tuple) else (key,)
        facets = [c for c in (row, col) if c]
        sub = runs
        for facet, value in zip(facets, keys):
            sub = sub[sub[facet] == value]
        means = {label: g.groupby("request_rate")["normalized_latency_s"].mean() for label, g in sub.groupby("label")}
        notes = common.series_notes(means, CLIP_S_PER_TOKEN, " s/token", x_name="rate")
        if notes:
            ax.set_title(ax.get_title() + "\n" + "\n".join(notes), fontsize=8)
        right = common.visible_right(means, CLIP_S_PER_TOKEN)
        if right is not None:
            left = float(sub["request_rate"].min())
            ax.set_xlim(left - 0.04 * (right - left), right + 0.04 * (right - left))
    grid.figure.suptitle("simulated, system vllm-2023; Alpaca is the synthetic stand-in", fontsize=9, y=-0.01, va="top")
    sns.move_legend(grid, "lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(order), 4),
                    title=None, frameon=False)
    return common.save(grid.figure, out_dir, NAME)
