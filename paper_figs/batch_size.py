"""Figure 13: batched requests per allocator, ShareGPT and Alpaca side by side, in the headline's
measure (``paper_figs.headline.batch_column``: time-weighted running requests; the step mean
of batched requests for runs that predate that column)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from paper_figs import common
from paper_figs.headline import batch_column

NAME = "batch_size"
EXPERIMENT = "paper-batch"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["mean_batch_size"])
    if runs is None:
        return []
    common.setup_style()
    column, _ = batch_column(runs)
    runs = common.numeric(runs, column)
    runs["dataset"] = runs["workload"].map(common.workload_name)
    known = ["ShareGPT", "Alpaca"]
    datasets = sorted(runs["dataset"].unique(), key=lambda d: (known.index(d) if d in known else 2, d))
    order = common.label_order(runs["label"])
    several_models = runs["model"].nunique() > 1
    common.check_alike(NAME, runs, ["label", "dataset", "model"])
    grid = sns.catplot(
        data=runs, kind="bar", x="label", y=column, order=order,
        hue="dataset", hue_order=datasets, palette="colorblind",
        col="model" if several_models else None, errorbar="sd", capsize=0.1,
        height=3.4, aspect=max(1.0, 0.3 * len(order)), sharey=False, legend_out=False,
    )  # fmt: skip
    grid.set_axis_labels("allocator", "running requests (time-weighted mean)" if column == "mean_running_requests"
                         else "mean batch size (requests)")
    grid.set_titles("{col_name}" if several_models else "")
    for ax in grid.axes.flat:
        ax.tick_params(axis="x", rotation=25)
        for tick in ax.get_xticklabels():
            tick.set_ha("right")
    if grid.legend is not None:
        grid.legend.set_title("workload")
    return common.save(grid.figure, out_dir, NAME)
