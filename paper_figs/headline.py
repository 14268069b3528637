"""``python -m paper_figs.headline [--index PATH]``: the README's table of headline numbers
next to the PagedAttention paper's (Kwon et al., SOSP 2023, section 6), from results only.

Rows at the paper's own operating points (ShareGPT 2 req/s, Alpaca 30 req/s; mean and
standard deviation over seeds) and, labelled "saturation", at loads that keep every pool full.
ShareGPT rows come twice where both were run: on the packaged records ("packaged") and on the
labelled length-matched variant (``sharegpt_matched``: the same records rescaled to the paper's
stated mean lengths).

Batched requests (Figure 13) are ``mean_running_requests``: the time-weighted mean of requests
in the running state, which is what a count of "batched requests" over a trace measures in a
system whose prompt-only steps leave the decoding requests out of that step's batch (vLLM 0.1);
``mean_batch_size`` (requests in each step's batch, averaged over steps) is used only for runs
that predate the running-requests column, and the row says so.

Sustainable rate (``paper_figs.sustainable``): walking up the swept rates of one allocator, the
last rate before the first that fails the latency rule (normalized latency over twice the lowest
rate's), the served rule (finished within 5% of arrived) or the queue rule (TTFT growing by more
than 0.02 s per s of trace); nothing after the first failure counts, and a system failing at its
lowest rate sustains "< that rate". Beside it, the last rate within a stated SLO (P99 TTFT <= 2 s).
"""
from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pandas as pd

from paper_figs.common import allocator_label
from paper_figs.sustainable import SLO_P99_TTFT_S, ratio_text, slo_rate, sustained
from kvbench.results.store import load_index

PAPER = {  # quoted from the paper's text (section 6) and the vLLM announcement (June 2023)
    "batch_vs_oracle": "2.2x", "batch_vs_max": "4.3x",
    "rate_vs_oracle": "1.7-2.7x", "rate_vs_max": "2.7-8x",
    "parallel": "n 2/4/6: 6.1/8.5/9.8%", "beam": "width 2/4/6: 37.6/53.1/55.2%",
    "announce_static-max_1": "14-24x (HF)", "announce_tgi-max_1": "2.2-2.5x (TGI)",
    "announce_static-max_3": "8.5-15x (HF)", "announce_tgi-max_3": "3.3-3.5x (TGI)",
}
BATCH_STUDIES = (("paper-batch", "paper rate", "packaged"), ("paper-batch-matched", "paper rate", "length-matched"),
                 ("paper-sat", "saturation", "packaged"))


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _paper_values(paper: str, allocator: str) -> list[tuple[float, float]]:
    """The paper's value(s) as (low, high) pairs: ``2.2x`` -> [(2.2, 2.2)], ``1.7-2.7x`` -> a range,
    ``n 2/4/6: 6.1/8.5/9.8%`` -> one pair per listed value; the memory row picks vLLM's or Orca's."""
    if paper.startswith("Orca ") and ", vLLM " in paper:
        orca, vllm = paper.split(", vLLM ")
        if not allocator.startswith(("paged", "Orca")):
            return []  # the paper states the memory share of vLLM and of Orca only
        paper = vllm if allocator.startswith("paged") else orca
    if ":" in paper:
        return [(float(v), float(v)) for v in _NUMBER.findall(paper.split(":", 1)[1])]
    nums = [float(v) for v in _NUMBER.findall(paper)]
    if len(nums) == 2 and "-" in paper:
        return [(nums[0], nums[1])]
    return [(nums[0], nums[0])] if len(nums) == 1 else []


def paper_error(measured: str, paper: str, allocator: str = "") -> str:
    """kvbench's value against the paper's, relative: ``+12%``, or ``in range`` / ``-30% below``
    / ``+5% above`` a stated range; one entry per value of a list; ``-`` without a paper value."""
    if paper == "-" or measured.startswith(("n/a", "no ratio")):
        return "-"
    targets = _paper_values(paper, allocator)
    if len(targets) > 1:  # a list: "2: 8.3%, 4: 12.8%, 6: 15.5%" -> the values after each colon
        got = [float(v.split(":")[1].strip().rstrip("%")) for v in measured.split(",") if ":" in v]
    else:
        found = _NUMBER.findall(measured)
        got = [float(found[0])] if found else []
    if not targets or len(got) != len(targets):
        return "-"
    out = []
    for value, (low, high) in zip(got, targets):
        if low == high:
            out.append(f"{100 * (value / low - 1):+.0f}%")
        elif value < low:
            out.append(f"{100 * (value / low - 1):+.0f}% below")
        elif value > high:
            out.append(f"{100 * (value / high - 1):+.0f}% above")
        else:
            out.append("in range")
    text = ", ".join(out)
    return f"lower bound {text}" if measured.startswith("more than") else text


def batch_column(runs: pd.DataFrame) -> tuple[str, str]:
    """The Figure 13 measure these runs have: running requests, or the step mean of older runs."""
    if "mean_running_requests" in runs and runs["mean_running_requests"].notna().all():
        return "mean_running_requests", "mean running requests (time-weighted)"
    return "mean_batch_size", "mean batch size (step mean: runs without mean_running_requests)"


def _rows(index: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return index[index["experiment"] == experiment]


def _label(row) -> str:
    return allocator_label(row["allocator"], row["reserve"], row["block_size"])


def sustainable_rate(runs: pd.DataFrame) -> float:
    """The last sustainable swept rate (``paper_figs.sustainable``); NaN when even the lowest fails."""
    return sustained(runs).rate


def _mean_sd(values: pd.Series, fmt: str, scale: float = 1.0) -> str:
    values = values.astype(float) * scale
    if len(values) > 1:
        return f"{fmt.format(values.mean())} ± {fmt.format(values.std())}"
    return fmt.format(values.mean())


def _ratio(sub: pd.DataFrame, top: str, base: str, column: str) -> str | None:
    """Mean ± sd over seeds of top/base (paired by seed), with the two means."""
    a = sub[sub["label"] == top].groupby("seed")[column].mean()
    b = sub[sub["label"] == base].groupby("seed")[column].mean()
    seeds = a.index.intersection(b.index)
    if not len(seeds):
        return None
    ratio = a[seeds] / b[seeds]
    spread = f" ± {ratio.std():.2f}" if len(seeds) > 1 else ""
    return f"{ratio.mean():.2f}x{spread} ({a[seeds].mean():.1f} vs {b[seeds].mean():.1f}; {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"


def headline(index: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for exp, when, data in BATCH_STUDIES:
        runs = _rows(index, exp)
        if runs.empty:
            continue
        runs = runs.assign(label=runs.apply(_label, axis=1))
        for wl in ("sharegpt", "alpaca"):
            sub = runs[runs["workload"].astype(str).str.startswith(wl)]
            if sub.empty:
                continue
            rate = f"{float(sub['request_rate'].iloc[0]):g} req/s, {when}"
            stream = f"ShareGPT ({data})" if wl == "sharegpt" else "Alpaca"
            if wl == "sharegpt":
                for label, g in sub.groupby("label"):
                    rows.append((f"KV memory holding tokens, {stream} {rate} (OPT-13B)", label,
                                 _mean_sd(g["mem_token_frac"], "{:.1f}%", 100), "Orca 20-38%, vLLM 96%"))
            column, what = batch_column(sub)
            for base, key in (("Orca (Oracle)", "batch_vs_oracle"), ("Orca (Pow2)", None), ("Orca (Max)", "batch_vs_max")):
                text = _ratio(sub, "paged (16)", base, column)
                if text:
                    paper = PAPER[key] if (wl == "sharegpt" and key) else "-"
                    rows.append((f"{what}, paged (16) / {base}, {stream} {rate} (OPT-13B)",
                                 "paged (16)", text, paper))
    for setup in ("opt13b", "opt66b", "opt175b"):
        for wl in ("sharegpt", "sharegpt-matched", "alpaca"):
            sub = _rows(index, f"paper-rate-{setup}-{wl}")
            if sub.empty:
                continue
            groups = dict(list(sub.groupby(sub.apply(_label, axis=1))))
            rates = {lab: sustained(g) for lab, g in groups.items()}
            slos = {lab: slo_rate(g) for lab, g in groups.items() if "p99_ttft_s" in g}
            paged = rates.get("paged (16)")
            proxy = " [keep-up by the mean-TTFT proxy]" if paged is not None and paged.proxy else ""
            for base, key in (("Orca (Oracle)", "rate_vs_oracle"), ("Orca (Max)", "rate_vs_max")):
                if paged is not None and base in rates:
                    rows.append((f"sustainable rate, paged (16) / {base}, {setup} {wl}", "paged (16)",
                                 ratio_text(paged, rates[base]) + proxy,
                                 PAPER[key] if wl.startswith("sharegpt") else "-"))
                if "paged (16)" in slos and base in slos:
                    rows.append((f"rate within P99 TTFT <= {SLO_P99_TTFT_S:g} s, paged (16) / {base}, {setup} {wl}",
                                 "paged (16)", ratio_text(slos["paged (16)"], slos[base]), "-"))
    sharing = _rows(index, "paper-sharing")
    paged_sharing = sharing[sharing["allocator"] == "paged"]
    for knob, key in (("n", "parallel"), ("beam_width", "beam")):
        if knob not in paged_sharing:
            continue
        other = "beam_width" if knob == "n" else "n"
        sub = paged_sharing[(paged_sharing[knob] > 1) & (paged_sharing[other] <= 1)]
        if len(sub):
            vals = sub.sort_values(knob)
            measures = [("sharing_saving_block_frac", "blocks, the paper's measure"), ("sharing_saving_frac", "token slots")]
            for column, what in measures:
                if column not in vals or vals[column].isna().any():
                    continue  # runs that predate the block column
                text = ", ".join(f"{int(k)}: {100 * v:.1f}%" for k, v in zip(vals[knob], vals[column]))
                rows.append((f"memory saved by sharing ({what}), {knob} (Alpaca, OPT-13B)", "paged (16)", text, PAPER[key]))
    rows += announcement(index)
    table = pd.DataFrame(rows, columns=["measure", "allocator", "kvbench (simulated A100)", "paper"])
    table["against the paper"] = [paper_error(m, pp, a) for m, pp, a in
                                  zip(table["kvbench (simulated A100)"], table["paper"], table["allocator"])]
    return table


def announcement(index: pd.DataFrame) -> list[tuple]:
    """Throughput of paged over the HF-style (static-max) and TGI-style (tgi-max) baselines, n = 1 and 3."""
    runs = _rows(index, "paper-announce")
    out = []
    if runs.empty or "baseline" not in runs:
        return out
    for (model, n), sub in runs.groupby(["model", "n"]):
        by = sub.groupby("baseline")["request_throughput"].mean()
        for base in ("static-max", "tgi-max"):
            if "paged" in by and base in by and by[base] > 0:
                out.append((f"throughput, paged / {base}, {model}, n={int(n)} (ShareGPT, 1,000 requests at once)",
                            "paged (16)", f"{by['paged'] / by[base]:.2f}x", PAPER.get(f"announce_{base}_{int(n)}", "-")))
    return out


def lengths(index: pd.DataFrame) -> pd.DataFrame:
    """Mean and median prompt and output tokens of each study's workload (first seed's stream)."""
    cols = ["mean_prompt_len", "median_prompt_len", "mean_output_len", "median_output_len"]
    if any(c not in index for c in cols):
        return pd.DataFrame()
    sub = index.dropna(subset=cols)
    sub = sub[sub["experiment"].astype(str).str.startswith("paper-")]
    out = sub.groupby(["experiment", "workload"])[cols].median().round(1).reset_index()
    return out


def to_markdown(table: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="results/paper/index.jsonl")
    args = parser.parse_args(argv)
    index = load_index(Path(args.index))
    table = headline(index)
    print(to_markdown(table) if len(table) else "no paper results in the index")
    stats = lengths(index)
    if len(stats):
        print("\nWorkload lengths (tokens) per study:\n")
        print(to_markdown(stats))


if __name__ == "__main__":
    main()
