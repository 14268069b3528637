"""KV memory saved by sharing against n, beam width and shared-prefix length (Figure 15).

Two measures: the PagedAttention paper's, ``sharing_saving_block_frac`` (blocks saved by sharing
over the blocks the sequences would hold without it), drawn solid as the figure's headline, and
``sharing_saving_frac`` (filled token slots saved), dashed beside it. Runs that predate the
block column show the token measure alone, and the axis says so.

The knobs are the summary's extra columns ``n``, ``beam_width`` and ``prefix_len``. A run goes
into the panel of a knob when it has that knob and the other two are neutral (null, n <= 1,
beam_width <= 1, prefix_len 0) and it belongs to the study that varies the knob (same model,
GPU, rate and experiment file as the runs with the knob set: the prefix study's L=0 runs and
the beam study's width-1 runs are not the n panel's n=1 point); runs lacking all three are
skipped. A panel without runs is left out.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from kvbench.results.grouping import experiment_files
from paper_figs import common

NAME = "sharing"
BLOCKS = "sharing_saving_block_frac"
EXPERIMENT = "paper-sharing"
KNOBS = {  # column: (axis label, neutral value)
    "n": ("parallel samples n", 1),
    "beam_width": ("beam width", 1),
    "prefix_len": ("shared prefix length (tokens)", 0),
}


STUDY_COLUMNS = ("model", "gpu_profile", "request_rate")  # what tells the n, beam and prefix studies apart


def _of_study(rows: pd.DataFrame, varied: pd.Series) -> pd.Series:
    """Rows of the study that varies the knob: a neutral run of another study (another model,
    GPU, rate or experiment file) is not this panel's point at the neutral value (it would be
    averaged into it)."""
    rows = rows.assign(experiment_file=experiment_files(rows))
    columns = [c for c in (*STUDY_COLUMNS, "experiment_file") if c in rows]
    if not varied.any():
        return pd.Series(True, index=rows.index)
    studies = set(rows.loc[varied, columns].astype(str).itertuples(index=False, name=None))
    return pd.Series([tuple(r) in studies for r in rows[columns].astype(str).itertuples(index=False, name=None)],
                     index=rows.index)


def panels(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The runs of each knob's panel (see the module docstring)."""
    neutral = {}
    for knob, (_, value) in KNOBS.items():
        column = runs[knob] if knob in runs else pd.Series(float("nan"), index=runs.index)
        neutral[knob] = column.isna() | (column <= value)
    out = {}
    for knob in KNOBS:
        if knob not in runs:
            continue
        others = pd.concat([neutral[k] for k in KNOBS if k != knob], axis=1).all(axis=1)
        rows = runs[runs[knob].notna() & others]
        rows = rows[_of_study(rows, rows[knob] > KNOBS[knob][1])]
        if not rows.empty:
            out[knob] = rows
    return out


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["sharing_saving_frac"])
    if runs is None:
        return []
    knobs = [k for k in KNOBS if k in runs]
    has_blocks = BLOCKS in runs and pd.to_numeric(runs[BLOCKS], errors="coerce").notna().any()
    runs = common.numeric(runs, "sharing_saving_frac", *([BLOCKS] if has_blocks else []), *knobs)
    by_knob = panels(runs)
    if not by_knob:
        return common.skip(NAME, "no run has n, beam_width or prefix_len")
    common.setup_style()
    headline = BLOCKS if has_blocks else "sharing_saving_frac"
    runs["saving_pct"] = 100 * runs[headline]
    order = common.label_order(runs["label"])
    colors = common.palette(order)
    fig, axes = plt.subplots(1, len(by_knob), figsize=(3.4 * len(by_knob), 3.3), squeeze=False)
    for ax, (knob, rows) in zip(axes[0], by_knob.items()):
        common.check_alike(NAME, rows, [knob, "label"])
        rows = rows.assign(saving_pct=100 * rows[headline])
        sns.lineplot(data=rows, x=knob, y="saving_pct", hue="label", hue_order=order,
                     palette=colors, marker="o", errorbar="sd", ax=ax, legend=False)
        if has_blocks:  # the token measure beside the paper's
            tokens = rows.assign(token_pct=100 * rows["sharing_saving_frac"])
            sns.lineplot(data=tokens, x=knob, y="token_pct", hue="label", hue_order=order, palette=colors,
                         marker="x", linestyle="--", errorbar=None, ax=ax, legend=False)
        ax.set_xlabel(KNOBS[knob][0])
        ax.set_ylabel("KV memory saved by sharing (%)\n" + ("solid: blocks (paper), dashed: token slots"
                                                               if has_blocks else "token slots (runs without blocks)"))
        ax.set_ylim(bottom=0)
        means = {label: g.groupby(knob)["saving_pct"].mean() for label, g in rows.groupby("label")}
        for names in common.coinciding(means):  # lines drawn on top of each other (e.g. the Orcas at 0)
            ax.text(0.04, 0.9, "one line, identical:\n" + "\n".join(names), transform=ax.transAxes,
                    va="top", ha="left", fontsize=7, color="0.3")
        values = sorted(rows[knob].unique())
        if knob == "prefix_len" and len(values) > 2 and min(values) > 0:
            common.log2_axis(ax, values)
        else:
            ax.set_xticks(values)
            ax.set_xticklabels([f"{v:g}" for v in values])
    handles = [plt.Line2D([], [], color=colors[lab], marker="o") for lab in order]
    common.legend_above(fig, handles, order)
    return common.save(fig, out_dir, NAME)
