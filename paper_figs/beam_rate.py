"""Figure 14b: normalized latency vs request rate, beam width 2, 4, 6 (one panel each), one line per
allocator."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_figs import sweeps

NAME = "beam_rate"
EXPERIMENT = "paper-rate-beam"


def draw(index_df: pd.DataFrame, out_dir: str | Path, results_root: str | Path,
         experiment: str | None = None) -> list[Path]:
    return sweeps.knob_rate_figure(index_df, out_dir, name=NAME, experiment=experiment or EXPERIMENT,
                                   knob="beam_width", knob_title="beam width")
