"""The hybrid study's running-request ratio taken apart: memory per running request and packing,
against the ideal of the same requests.

    PYTHONPATH=. .venv/bin/python scripts/hybrid_ratios.py results/paper/hybrid/index.jsonl [--experiment hybrid-study]

A grouped allocator runs more requests than ``uniform`` for two reasons that the ratio of mean
running requests mixes: each running request holds fewer bytes (the window blocks it dropped),
and the pool is kept fuller or emptier. With H the bytes an allocator holds in blocks (the sum of
``mem_<kind>_frac``), R its mean running requests, over the pool:

    running ratio = R / R_uniform = (H_uniform / R_uniform) / (H / R)  x  H / H_uniform
                  =   memory ratio per running request                 x  packing

Both are ratios of time-weighted means. The ideal is computed on each run's own requests, at the
same steps: U, the bytes uniform paging would hold for them (every token in every attention layer:
the full group's needed bytes scaled to all attention layers, plus one state a request), over N,
the bytes some layer still reads (``mem_needed_frac``). ``U/H`` is what the allocator achieved on
those requests (below 1 for uniform itself: its blocks' unfilled tails).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvbench.layer_groups import KINDS, layer_groups  # noqa: E402
from kvbench.sim.profiles import load_model  # noqa: E402

ALLOCATORS = ("uniform", "hybrid_static", "hybrid", "lcm")


def uniform_frac(row: dict, model) -> float:
    """Pool fraction uniform paging would hold for this run's requests (no block padding)."""
    groups = layer_groups(model)
    full = next(g for g in groups if g.kind == "full")
    tokens = row["mem_full_needed_frac"] / full.token_bytes  # every computed token, in pool-fraction units
    attention = sum(g.token_bytes for g in groups if g.kind != "state")
    return tokens * attention + (row.get("mem_state_needed_frac") or 0.0)


def held_frac(row: dict) -> float:
    return sum(row.get(f"mem_{kind}_frac") or 0.0 for kind in KINDS)


def table(rows: list[dict]) -> list[str]:
    out = ["| model | workload | allocator | mean running | vs uniform | memory per request | packing | "
           "ideal U/N | achieved U/H | held |", "| --- " * 10 + "|"]
    keyed = {(r["model"], str(r["workload"]).split("(")[0], r["allocator"]): r for r in rows}
    for (model_name, workload, allocator), row in sorted(keyed.items()):
        base = keyed.get((model_name, workload, "uniform"))
        if base is None or allocator not in ALLOCATORS:
            continue
        model = load_model(model_name)
        running, held = row["mean_running_requests"], held_frac(row)
        b_running, b_held = base["mean_running_requests"], held_frac(base)
        per_request = (b_held / b_running) / (held / running)
        packing = held / b_held
        u = uniform_frac(row, model)
        out.append(f"| {model_name} | {workload} | {allocator} | {running:.2f} | {running / b_running:.2f}x | "
                   f"{per_request:.2f}x | {packing:.2f}x | {u / row['mem_needed_frac']:.2f}x | {u / held:.2f}x | "
                   f"{100 * held:.1f}% |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, help="an index.jsonl of hybrid-study runs")
    parser.add_argument("--experiment", default=None, help="keep the rows of this experiment only")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.index.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("mem_needed_frac") is not None
            and (args.experiment is None or r.get("experiment") == args.experiment)]
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
