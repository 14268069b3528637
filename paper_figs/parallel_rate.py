"""Figure 14a: normalized latency vs request rate, parallel samples 2, 4, 6 (one panel each), one line
per allocator."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "parallel_rate"
EXPERIMENT = "paper-rate-parallel"
KNOB = "n"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    runs = common.pick(index_df, NAME, experiment or EXPERIMENT, need=["request_rate", "normalized_latency_s", KNOB])
    if runs is None:
        return []
    runs = sweeps.finite(runs, "request_rate", "normalized_latency_s", KNOB)
    common.setup_style()
    model, data = runs["model"].iloc[0], common.workload_name(runs["workload"].iloc[0])
    fig = sweeps.lines(runs, x="request_rate", y="normalized_latency_s", series="label", panel=KNOB,
                       panel_order=sorted(runs[KNOB].unique()),
                       panel_title=lambda v: f"{model}, {data}, parallel samples {int(v)}",
                       xlabel="request rate (req/s)", ylabel="normalized latency (s/token)",
                       suptitle="simulated, system vllm-2023; Alpaca is the synthetic stand-in")
    return common.save(fig, out_dir, NAME)
