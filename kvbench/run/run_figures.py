"""A run's own figure (logged to W&B): the memory breakdown over the run's steps."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

CATEGORIES = [("mem_token_frac", "token", "#2a9d8f"), ("mem_reserved_frac", "reserved", "#e9c46a"),
              ("mem_internal_frac", "internal", "#e76f51"), ("mem_external_frac", "external", "#d9d9d9"),
              ("mem_cached_frac", "cached", "#8ab17d")]  # prefix caches only (null for the others)


def memory_over_time(steps: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Stacked fractions of the KV pool against simulated/measured time; PNG at ``path``."""
    import matplotlib  # start-up time: matplotlib, only with a logger

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: as above

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    shown = [c for c in CATEGORIES if c[0] in steps and steps[c[0]].notna().any()]
    if len(steps):
        ax.stackplot(steps["time_s"], *[steps[c].fillna(0.0) for c, _, _ in shown],
                     labels=[label for _, label, _ in shown], colors=[color for _, _, color in shown])
        ax.set_xlim(float(steps["time_s"].min()), float(steps["time_s"].max()))
    ax.set(xlabel="time (s)", ylabel="fraction of KV slots", ylim=(0, 1))
    ax.set_title(title, pad=22)
    # the stack fills the axes: the legend sits above them, between the title and the data
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncol=len(CATEGORIES), frameon=False)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path
