"""A run's own figure (logged to W&B): the memory breakdown over the run's steps."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

CATEGORIES = [("mem_token_frac", "token", "#2a9d8f"), ("mem_reserved_frac", "reserved", "#e9c46a"),
              ("mem_internal_frac", "internal", "#e76f51"), ("mem_external_frac", "external", "#d9d9d9")]


def memory_over_time(steps: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Stacked fractions of the KV pool against simulated/measured time; PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if len(steps):
        ax.stackplot(steps["time_s"], *[steps[c] for c, _, _ in CATEGORIES],
                     labels=[label for _, label, _ in CATEGORIES], colors=[color for _, _, color in CATEGORIES])
    ax.set(xlabel="time (s)", ylabel="fraction of KV slots", ylim=(0, 1), title=title)
    ax.legend(loc="upper right", fontsize=8, ncol=4)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path
