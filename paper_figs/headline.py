"""``python -m paper_figs.headline [--index PATH]``: the README's table of headline numbers
next to the PagedAttention paper's (Kwon et al., SOSP 2023, section 6), from results only.

Sustainable rate: the highest swept rate whose normalized latency stays under twice the
lowest-rate latency of the same allocator (the knee of the paper's Figure 12 curves).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from paper_figs.common import allocator_label
from kvbench.results import load_index

PAPER = {  # quoted from the paper's text (section 6)
    "batch_vs_oracle": "2.2x", "batch_vs_max": "4.3x",
    "rate_vs_oracle": "1.7-2.7x", "rate_vs_max": "2.7-8x",
    "parallel": "6.1-9.8%", "beam": "37.6-55.2%",
}


def _rows(index: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return index[index["experiment"] == experiment]


def _label(row) -> str:
    return allocator_label(row["allocator"], row["reserve"], row["block_size"])


def sustainable_rate(runs: pd.DataFrame) -> float:
    runs = runs.sort_values("request_rate")
    base = float(runs["normalized_latency_s"].iloc[0])
    ok = runs[runs["normalized_latency_s"] <= 2 * base]
    return float(ok["request_rate"].max()) if len(ok) else math.nan


def headline(index: pd.DataFrame) -> pd.DataFrame:
    rows = []
    br = _rows(index, "paper-breakdown")
    for _, r in br.iterrows():
        rows.append(("KV memory holding tokens, saturating ShareGPT load (OPT-13B)", _label(r),
                     f"{100 * r['mem_token_frac']:.1f}%", "Orca 20-38%, vLLM 96%"))
    batch = _rows(index, "paper-batch")
    for wl in ("sharegpt", "alpaca"):
        sub = batch[batch["workload"].astype(str).str.startswith(wl)]
        by = {_label(r): r["mean_batch_size"] for _, r in sub.iterrows()}
        paged = next((v for k, v in by.items() if k.startswith("paged")), None)
        if paged is None:
            continue
        for base, key in (("Orca (Oracle)", "batch_vs_oracle"), ("Orca (Max)", "batch_vs_max")):
            if base in by:
                paper = PAPER[key] if wl == "sharegpt" else "-"
                rows.append((f"mean batched requests, paged (16) / {base}, {wl} (OPT-13B)", "paged (16)",
                             f"{paged / by[base]:.2f}x ({paged:.1f} vs {by[base]:.1f})", paper))
    for setup in ("opt13b", "opt66b", "opt175b"):
        for wl in ("sharegpt", "alpaca"):
            sub = _rows(index, f"paper-rate-{setup}-{wl}")
            if sub.empty:
                continue
            rates = {lab: sustainable_rate(g) for lab, g in sub.groupby(sub.apply(_label, axis=1))}
            paged = rates.get("paged (16)")
            for base, key in (("Orca (Oracle)", "rate_vs_oracle"), ("Orca (Max)", "rate_vs_max")):
                if paged and base in rates and rates[base] > 0:
                    ceiling = " (at least: paged never saturated)" if paged >= sub["request_rate"].max() else ""
                    rows.append((f"sustainable rate, paged (16) / {base}, {setup} {wl}", "paged (16)",
                                 f"{paged / rates[base]:.2f}x ({paged:g} vs {rates[base]:g} req/s){ceiling}",
                                 PAPER[key] if wl == "sharegpt" else "-"))
    sharing = _rows(index, "paper-sharing")
    paged_sharing = sharing[sharing["allocator"] == "paged"]
    for knob, key in (("n", "parallel"), ("beam_width", "beam")):
        if knob not in paged_sharing:
            continue
        other = "beam_width" if knob == "n" else "n"
        sub = paged_sharing[(paged_sharing[knob] > 1) & (paged_sharing[other] <= 1)]
        if len(sub):
            vals = sub.sort_values(knob)
            text = ", ".join(f"{int(k)}: {100 * v:.1f}%" for k, v in zip(vals[knob], vals["sharing_saving_frac"]))
            rows.append((f"memory saved by sharing, {knob} (Alpaca, OPT-13B)", "paged (16)", text, PAPER[key]))
    return pd.DataFrame(rows, columns=["measure", "allocator", "kvbench (simulated A100)", "paper"])


def to_markdown(table: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="results/paper/index.jsonl")
    args = parser.parse_args(argv)
    table = headline(load_index(Path(args.index)))
    print(to_markdown(table) if len(table) else "no paper results in the index")


if __name__ == "__main__":
    main()
