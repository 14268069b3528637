"""Figure 17: the chatbot workload (ShareGPT history as the prompt) across request rates."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "chatbot_rate"
EXPERIMENT = "paper-rate-chat"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["request_rate", "normalized_latency_s"])
    if runs is None:
        return []
    runs = sweeps.finite(runs, "request_rate", "normalized_latency_s")
    common.setup_style()
    stats = ""
    if "mean_prompt_len" in runs:  # each rate draws its own stream: the range over the runs, whatever their order

        def spread(column: str) -> str:
            values = pd.to_numeric(runs[column], errors="coerce").dropna()
            low, high = f"{values.min():.0f}", f"{values.max():.0f}"
            return low if low == high else f"{low}-{high}"

        stats = (f"; per run: prompt mean {spread('mean_prompt_len')} / median {spread('median_prompt_len')}, "
                 f"output mean {spread('mean_output_len')} / median {spread('median_output_len')} tokens")
    fig = sweeps.lines(runs, x="request_rate", y="normalized_latency_s", series="label", panel="model",
                       panel_title=lambda v: f"{v}, chatbot (ShareGPT history, last 1,024 tokens)",
                       xlabel="request rate (req/s)", ylabel="normalized latency (s/token)",
                       suptitle="SmolLM2 token lengths" + stats)
    return common.save(fig, out_dir, NAME)
