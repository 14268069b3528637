"""Figure 18: paged attention kernel latency vs context length, from GPU results only.

Reads ``kernel_latency.csv`` (columns block_size, context_len, batch, latency_us) that
``scripts/gpu_check.sh`` writes next to the index; without it the figure is skipped (no GPU
measurement is ever invented here)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import common, sweeps

NAME = "kernel_latency"
EXPERIMENT = "kernel_latency.csv"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    path = Path(results_root) / (experiment or EXPERIMENT)
    if not path.is_file():
        return common.skip(NAME, f"no GPU kernel results at {path} (run scripts/gpu_check.sh on a GPU)")
    data = pd.read_csv(path)
    common.setup_style()
    data["block"] = data["block_size"].map(lambda b: f"block {b}")
    fig = sweeps.lines(data, x="context_len", y="latency_us", series="block", panel="batch",
                       panel_title=lambda v: f"batch {v}", xlabel="context length (tokens)",
                       ylabel="kernel latency (us)", suptitle=f"measured on a GPU: {path.name}", clip=None, logx=True)
    return common.save(fig, out_dir, NAME)
