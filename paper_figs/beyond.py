"""What the "beyond the paper" figures share: labels for the post-2023 allocators, the five-way
memory breakdown (the paper's four plus ``cached``), and the workload order."""
from __future__ import annotations

import math

import pandas as pd
from matplotlib.patches import Patch

from paper_figs import common

CATEGORIES5: tuple[str, ...] = ("token", "reserved", "internal", "external", "cached")
COLUMNS5: dict[str, str] = {**common.CATEGORY_COLUMNS, "cached": "mem_cached_frac"}
COLORS5: dict[str, tuple] = {**common.CATEGORY_COLORS, "cached": (0.55, 0.70, 0.90)}  # light blue
WORKLOAD_ORDER = ("sharegpt", "multiturn", "system_prompts")
WORKLOAD_NAMES = {"sharegpt": "ShareGPT (single turn)", "multiturn": "multi-turn chat",
                  "system_prompts": "shared system prompts"}


def page_label(page_bytes: object) -> str:
    if page_bytes is None or (isinstance(page_bytes, float) and math.isnan(page_bytes)):
        return "?"
    size = int(page_bytes)
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def label(row: pd.Series) -> str:
    """Paper labels for the 2023 field; radix and vAttention by their own names."""
    name = str(row["allocator"])
    if name == "radix":
        return "radix"
    if name == "vattention":
        return f"vAttention ({page_label(row.get('page_bytes'))})"
    if name == "paged_prefix":
        return "paged+prefix"
    return common.allocator_label(row["allocator"], row["reserve"], row["block_size"], with_block=False)


def workload_key(workload: object) -> str:
    text = str(workload)
    for key in WORKLOAD_ORDER:
        if text.startswith(key):
            return key
    return text


def five_way(frame: pd.DataFrame) -> pd.DataFrame:
    """The five category columns as floats; ``mem_cached_frac`` is 0 where nothing is cached."""
    out = common.numeric(frame, *COLUMNS5.values())
    out["mem_cached_frac"] = out["mem_cached_frac"].fillna(0.0)
    return out


def handles5() -> list:
    return [Patch(facecolor=COLORS5[c], edgecolor="0.4", linewidth=0.5, label=c) for c in CATEGORIES5]
