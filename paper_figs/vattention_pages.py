"""vAttention page size against the model: internal waste and how many requests fit.

x: page size of one layer's K (or V) tensor (64 KiB, 256 KiB, 2 MiB); one line per model. Left:
the internal share of the KV pool (the unfilled tail of every request's last page, in every
layer and tensor). Right: mean batch size relative to paged at block 16 on the same model and
pool (ShareGPT, every request at time 0, so the batch is what memory admits).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from paper_figs import beyond, common

NAME = "vattention_pages"
MARKERS = ("o", "s", "^", "D")
STYLES = ("-", "--", "-.", ":")
EXPERIMENT = "vattention-pages"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["mem_internal_frac", "mean_batch_size"])
    if runs is None:
        return []
    runs = common.numeric(runs, "mem_internal_frac", "mean_batch_size", "tokens_per_page") \
        if "tokens_per_page" in runs else common.numeric(runs, "mem_internal_frac", "mean_batch_size")
    paged = runs[runs["allocator"] == "paged"].groupby("model")[["mean_batch_size", "mem_internal_frac"]].mean()
    va = runs[runs["allocator"] == "vattention"].copy()
    if va.empty or paged.empty:
        return common.skip(NAME, "needs vattention and paged runs")
    va["page_bytes"] = pd.to_numeric(va["page_bytes"], errors="coerce")
    common.setup_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    pages_of: dict[tuple, list[str]] = {}  # models with the same tokens per page draw nearly one line
    common.check_alike(NAME, va, ["model", "page_bytes"])
    common.check_alike(NAME, runs[runs["allocator"] == "paged"], ["model"])
    for i, (model, frame) in enumerate(va.groupby("model")):
        frame = frame.groupby("page_bytes").mean(numeric_only=True).sort_index()
        kib = frame.index.to_numpy() / 1024
        style = {"marker": MARKERS[i % len(MARKERS)], "ls": STYLES[i % len(STYLES)], "markersize": 7 - 1.5 * i}
        line = left.plot(kib, 100 * frame["mem_internal_frac"], label=model, **style)[0]
        if "tokens_per_page" in frame:
            pages_of.setdefault(tuple(frame["tokens_per_page"].round()), []).append(str(model))
        if model in paged.index:
            left.axhline(100 * paged.loc[model, "mem_internal_frac"], color=line.get_color(), ls=":", lw=1)
            right.plot(kib, frame["mean_batch_size"] / paged.loc[model, "mean_batch_size"],
                       color=line.get_color(), label=model, **style)
    same = [" and ".join(models) for models in pages_of.values() if len(models) > 1]
    if same:
        left.text(0.03, 0.97, "\n".join(f"{m}: the same tokens per page,\nso nearly one line" for m in same),
                  transform=left.transAxes, va="top", ha="left", fontsize=7, color="0.3")
    for ax in (left, right):
        common.log2_axis(ax, sorted(set(va["page_bytes"].dropna() / 1024)))
        ax.set_xlabel("page size (KiB, per layer and K|V tensor)")
    left.set_ylabel("internal waste (% of KV pool)")
    left.set_title("dotted: paged, block 16 (under 1% for every model)")
    right.axhline(1.0, color="0.4", ls=":", lw=1)
    right.set_ylabel("mean batch size / paged-16")
    common.legend_above(fig, *left.get_legend_handles_labels())
    return common.save(fig, out_dir, NAME)
