"""The vLLM announcement's comparison: output-token throughput of each baseline vs paged, for
LLaMA-7B on an A10G and LLaMA-13B on an A100-40GB, one and three parallel outputs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from paper_figs import common

NAME = "announcement"
EXPERIMENT = "paper-announce"
BASELINES = {  # config name -> label, in the announcement's order
    "static-max": "static batching (max)", "tgi-max": "continuous, contiguous (max)",
    "orca-max": "Orca (Max)", "orca-pow2": "Orca (Pow2)", "orca-oracle": "Orca (Oracle)", "paged": "paged (16)",
}
MODEL_ORDER = ["llama-7b", "llama-13b"]


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["output_token_throughput", "baseline"])
    if runs is None:
        return []
    runs = common.numeric(runs, "output_token_throughput")
    runs["system"] = runs["baseline"].map(BASELINES)
    runs["setup"] = runs["model"] + " on " + runs["gpu_profile"]
    setups = sorted(runs["setup"].unique(), key=lambda s: MODEL_ORDER.index(s.split(" on ")[0]) if s.split(" on ")[0] in MODEL_ORDER else 9)
    common.setup_style()
    grid = sns.catplot(data=runs, kind="bar", x="system", y="output_token_throughput", order=list(BASELINES.values()),
                       hue="n", palette="colorblind", col="setup", col_order=setups, height=3.4, aspect=1.3,
                       sharey=False, legend_out=False)
    grid.set_axis_labels("", "output tokens/s (simulated)")
    grid.set_titles("{col_name}, ShareGPT, all requests at once")
    for ax in grid.axes.flat:
        ax.tick_params(axis="x", rotation=30)
        for tick in ax.get_xticklabels():
            tick.set_ha("right")
    if grid.legend is not None:
        grid.legend.set_title("outputs per request (n)")
    return common.save(grid.figure, out_dir, NAME)
