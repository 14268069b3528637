"""Figure 16: shared prefix (1-shot 80 and 5-shot 341 tokens) across request rates."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "prefix_rate"
EXPERIMENT = "paper-rate-prefix"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["request_rate", "normalized_latency_s", "prefix_len"])
    if runs is None:
        return []
    runs = sweeps.finite(runs, "request_rate", "normalized_latency_s", "prefix_len")
    common.setup_style()
    model = runs["model"].iloc[0]
    shots = {80: "1-shot", 341: "5-shot"}
    fig = sweeps.lines(runs, x="request_rate", y="normalized_latency_s", series="label", panel="prefix_len",
                       panel_order=sorted(runs["prefix_len"].unique()),
                       panel_title=lambda v: f"{model}, {shots.get(int(v), '')} prefix of {int(v)} tokens",
                       xlabel="request rate (req/s)", ylabel="normalized latency (s/token)",
                       suptitle="requests after the prefix: Alpaca-shaped (synthetic)")
    return common.save(fig, out_dir, NAME)
