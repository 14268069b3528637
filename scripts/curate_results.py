"""Copy a results index into a small, committable reference set.

    .venv/bin/python scripts/curate_results.py SRC_DIR DST_DIR [--keep-steps EXP ...] [--since RUN_ID]
        [--drop-before EXPERIMENT=RUN_ID ...]

Keeps the newest run of each configuration (every setting the grouping rule reads, seeds included,
and the experiment file it ran from: two studies' runs of the same settings are each their own
study's point; runs that differ in any recorded ``cfg.*`` leaf are both kept), copies summary.json of every kept run plus its
steps/requests/memmap files only for the experiments named by --keep-steps (the figures that
read them), and writes DST_DIR/index.jsonl with run_dir paths relative to DST_DIR.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

from kvbench.results.grouping import experiment_files, group_keys, is_seed, setting_columns


def configuration_keys(rows: list[dict]) -> list[tuple]:
    """One key per row: its value of every setting column of the rows together, the seeds and the
    experiment file it ran from (kvbench.results.grouping's rule, so a knob added later splits too)."""
    frame = pd.DataFrame(rows)
    columns = [*setting_columns(frame), *(c for c in frame.columns if is_seed(str(c)))]
    return [(*key, file) for key, file in zip(group_keys(frame, columns), experiment_files(frame))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--keep-steps", nargs="*", default=["paper-memmap", "paper-token-time"])
    parser.add_argument("--since", default="", help="drop runs whose run_id sorts before this")
    parser.add_argument("--drop-before", nargs="*", default=[], metavar="EXPERIMENT=RUN_ID",
                        help="drop an experiment's runs older than RUN_ID (superseded by a rerun)")
    args = parser.parse_args()
    kept = []
    for line in (args.src / "index.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        cutoff = dict(item.split("=", 1) for item in args.drop_before).get(row["experiment"], args.since)
        if row["run_id"] >= max(cutoff, args.since):
            kept.append(row)
    rows: dict[tuple, dict] = {}
    for key, row in zip(configuration_keys(kept), kept):
        if key not in rows or rows[key]["run_id"] < row["run_id"]:
            rows[key] = row
    args.dst.mkdir(parents=True, exist_ok=True)
    out = []
    for row in sorted(rows.values(), key=lambda r: (r["experiment"], r["run_id"])):
        src_dir = args.src / row["run_dir"]
        rel = Path("runs") / row["experiment"] / row["run_id"]
        (args.dst / rel).mkdir(parents=True, exist_ok=True)
        names = ["summary.json"]
        if row["experiment"] in args.keep_steps:
            names += ["steps.parquet", "requests.parquet", "memmap.npz"]
        for name in names:
            if (src_dir / name).exists():
                shutil.copy2(src_dir / name, args.dst / rel / name)
        out.append(json.dumps(row | {"run_dir": str(rel)}))
    (args.dst / "index.jsonl").write_text("\n".join(out) + "\n")
    print(f"{len(out)} runs -> {args.dst}")


if __name__ == "__main__":
    main()
