"""Memory map: every slot of the KV pool over time, per allocator, coloured by category.

Reads ``memmap.npz`` from each run directory: ``time_s`` [S], ``category`` [S, slots] int8
(0 external, 1 token, 2 reserved, 3 internal) and ``owner`` [S, slots] int32 (request id or
-1). Snapshots are held until the next one (resampled onto an even time grid for imshow).
Pools larger than MAX_SLOTS are shown k slots to a row: the row takes the category most of
its k slots have, and the owner of its first slot. A second row of panels colours the slots
by owner (request id modulo a 20-colour palette) when the file has ``owner``. All panels share
the time axis, so an allocator that finishes the same requests sooner shows it.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap

from paper_figs import common

NAME = "memory_map"
EXPERIMENT = "paper-memmap"
MEMMAP_FILE = "memmap.npz"
MAX_SLOTS = 512  # image rows per panel
MAX_TIMES = 600  # image columns per panel
MAX_PANELS = 6


def _with_memmap(runs: pd.DataFrame, results_root) -> pd.DataFrame:
    has = [(common.run_dir(row, results_root) / MEMMAP_FILE).is_file() for _, row in runs.iterrows()]
    return runs[pd.Series(has, index=runs.index, dtype=bool)]


def _resample(time_s: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """Indices of the snapshot in force at each of MAX_TIMES even times, and the time extent."""
    start, end = float(time_s[0]), float(time_s[-1])
    if len(time_s) > 1:
        end += float(np.median(np.diff(time_s)))  # the last snapshot lasts one typical interval
    if end <= start:
        end = start + 1.0
    columns = min(MAX_TIMES, max(len(time_s), 2) * 4)
    times = np.linspace(start, end, columns, endpoint=False)
    index = np.clip(np.searchsorted(time_s, times, side="right") - 1, 0, len(time_s) - 1)
    return grid[index], (start, end)


def _bin_slots(category: np.ndarray, k: int) -> np.ndarray:
    """[S, slots] -> [S, ceil(slots / k)]: the most common category of each run of k slots."""
    if k == 1:
        return category
    pad = (-category.shape[1]) % k
    padded = np.pad(category, ((0, 0), (0, pad)), constant_values=-1)  # -1: counts for nothing
    binned = padded.reshape(category.shape[0], -1, k)
    counts = np.stack([(binned == code).sum(axis=2) for code in range(4)])
    return counts.argmax(axis=0).astype(np.int8)


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    experiment = experiment or EXPERIMENT
    if index_df.empty:
        return common.skip(NAME, "the index has no runs")
    labelled = common.with_labels(index_df)
    mine = (labelled["experiment"] == experiment).fillna(False).astype(bool)
    runs = _with_memmap(labelled[mine], results_root)
    if runs.empty:
        runs = _with_memmap(labelled, results_root)
        if runs.empty:
            return common.skip(NAME, f"no run of experiment {experiment!r}, nor any other, has {MEMMAP_FILE}")
        common.note(NAME, f"no run of experiment {experiment!r} has {MEMMAP_FILE}; "
                          f"falling back to the {len(runs)} runs that have one")
    runs = runs.drop_duplicates("label", keep="last")  # one panel per allocator
    order = common.label_order(runs["label"])[:MAX_PANELS]
    runs = runs.set_index("label").loc[order]
    maps = {}
    for label, row in runs.iterrows():
        with np.load(common.run_dir(row, results_root) / MEMMAP_FILE) as npz:
            maps[label] = {k: npz[k] for k in npz.files}
    with_owner = all("owner" in m for m in maps.values())
    common.setup_style()
    nrows = 2 if with_owner else 1
    fig, axes = plt.subplots(nrows, len(maps), figsize=(3.4 * len(maps), 2.9 * nrows), squeeze=False,
                             sharex=True)
    codes = common.MEMMAP_CODES
    category_cmap = ListedColormap([common.CATEGORY_COLORS[c] for c in sorted(codes, key=codes.get)])
    owner_cmap = ListedColormap(plt.get_cmap("tab20").colors).with_extremes(bad="white")
    spans = []
    for col, (label, arrays) in enumerate(maps.items()):
        time_s = np.asarray(arrays["time_s"], float)
        category = np.asarray(arrays["category"])
        num_slots = category.shape[1]
        stride = max(1, math.ceil(num_slots / MAX_SLOTS))
        cat, (t0, t1) = _resample(time_s, _bin_slots(category, stride))
        extent = (t0, t1, 0, num_slots)
        ax = axes[0][col]
        ax.imshow(cat.T, origin="lower", aspect="auto", extent=extent, cmap=category_cmap,
                  vmin=-0.5, vmax=3.5, interpolation="nearest")
        ax.set_title(label)
        if with_owner:
            owner, _ = _resample(time_s, np.asarray(arrays["owner"])[:, ::stride])
            shown = np.ma.masked_where(owner < 0, owner % 20)  # -1: no owner, white
            axes[1][col].imshow(shown.T, origin="lower", aspect="auto", extent=extent,
                                cmap=owner_cmap, vmin=-0.5, vmax=19.5, interpolation="nearest")
        for row_axes in axes:
            row_axes[col].grid(False)
        axes[-1][col].set_xlabel("time (s)")
        spans.append((t0, t1))
        if stride > 1:
            ax.set_title(f"{label}\n({stride} slots per row)")
    axes[0][0].set_xlim(min(t for t, _ in spans), max(t for _, t in spans))  # shared by all
    axes[0][0].set_ylabel("KV slot index\n(by category)")
    if with_owner:
        axes[1][0].set_ylabel("KV slot index\n(by request)")
    common.legend_above(fig, common.category_handles(), list(common.CATEGORIES))
    return common.save(fig, out_dir, NAME)
