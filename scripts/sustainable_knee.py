"""Sustainable rates by bisection: run a rate study's grid, then new runs between grid points.

    PYTHONPATH=. .venv/bin/python scripts/sustainable_knee.py --experiment paper-rate-opt13b-alpaca
        [--experiment ...] [--allocators paged,orca-oracle,orca-max] [--duration S] [--seed 0]
        [--jobs 2] [--override KEY=VALUE ...] [--out FILE.csv] [--table FILE.md]

For each experiment and allocator: every swept rate of the experiment's grid is run (one seed,
the experiment's trace length or ``--duration``), judged by the rule of
``paper_figs.sustainable`` (latency within twice the lowest rate's, served within 5% of arrived,
TTFT not growing by more than 0.02 s per s), and the bracket between the last sustainable grid
rate and the first failing one is bisected with new runs until it is at most 1 req/s or 5% wide.
The last rate whose P99 TTFT is within the SLO (2 s) is bisected the same way. A system failing
at the lowest grid rate sustains "< that rate"; one passing at the highest, ">= it". Prints and
writes every run's point (``--out``) and a markdown table of knees and paged's ratios
(``--table``). All runs are sim runs through ``kvbench.run.lifecycle.run``; nothing is added to results/.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvbench.config.errors import CONF_DIR  # noqa: E402
from paper_figs.sustainable import (  # noqa: E402
    SLO_P99_TTFT_S, Sustained, bisect_knee, point_table, ratio_text, slo_rate, sustained,
)

POINT_COLUMNS = ("request_rate", "normalized_latency_s", "served_frac", "ttft_growth", "p99_ttft_s",
                 "mean_ttft_s", "request_throughput", "num_requests", "num_preemptions")
LABELS = {"paged": "paged (16)", "orca-oracle": "Orca (Oracle)", "orca-max": "Orca (Max)",
          "orca-pow2": "Orca (Pow2)"}


def grid_rates(experiment: str) -> list[float]:
    """The experiment's swept ``workload.request_rate`` values, ascending."""
    conf = OmegaConf.load(CONF_DIR / "experiment" / f"{experiment}.yaml")
    rates = str(OmegaConf.select(conf, "hydra.sweeper.params")["workload.request_rate"])
    return sorted(float(r) for r in rates.split(","))


def run_point(experiment: str, allocator: str, rate: float, extra: tuple[str, ...]) -> dict:
    """One sim run at one rate; the summary columns the rule reads."""
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run

    with tempfile.TemporaryDirectory(prefix="kvbench-knee-") as tmp:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                f"experiment={experiment}", f"allocator={allocator}", f"workload.request_rate={rate!r}",
                *extra, "progress=false", "logger=none", f"results_dir={tmp}"])
        summary = run(cfg, run_dir=Path(tmp) / "run")
    return {k: summary.get(k) for k in POINT_COLUMNS}


def check_overrides(tasks: list[tuple[str, str, tuple[str, ...]]]) -> str | None:
    """One line naming the first task whose overrides do not compose, else None (nothing is run)."""
    from hydra import compose, initialize_config_dir

    for experiment, allocator, extra in tasks:
        try:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                compose(config_name="config", overrides=[f"experiment={experiment}", f"allocator={allocator}", *extra])
        except Exception as exc:  # Hydra's own errors: an unknown key, group or value
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"--allocators/--override: {experiment} with allocator={allocator}: {first}"
    return None


class Study:
    """The runs of one experiment and allocator, each rate run at most once."""

    def __init__(self, experiment: str, allocator: str, extra: tuple[str, ...]) -> None:
        self.experiment, self.allocator, self.extra = experiment, allocator, extra
        self.points: dict[float, dict] = {}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.points.values())).astype({"request_rate": float})

    def point(self, rate: float) -> dict:
        if rate not in self.points:
            self.points[rate] = run_point(self.experiment, self.allocator, rate, self.extra)
            print(f"  {self.experiment} {self.allocator} {rate:g} req/s: "
                  f"{ {k: self.points[rate][k] for k in POINT_COLUMNS[1:5]} }", flush=True)
        return self.points[rate]

    def passes(self, rate: float) -> bool:
        self.point(rate)
        return bool(point_table(self.frame())["sustainable"].get(rate, False))

    def within_slo(self, rate: float) -> bool:
        p99 = self.point(rate)["p99_ttft_s"]
        return p99 is not None and p99 <= SLO_P99_TTFT_S


def _refine(grid: Sustained, rates: list[float], passes) -> tuple[Sustained, int]:
    """Bisect between the grid's last passing rate and the next grid rate."""
    if grid.below is not None or grid.ceiling:
        return grid, 0
    high = rates[rates.index(grid.rate) + 1]
    low, _, tried = bisect_knee(passes, grid.rate, high)
    return Sustained(low, proxy=grid.proxy), tried


def knee(experiment: str, allocator: str, extra: tuple[str, ...]) -> dict:
    """Grid, then bisection for the rule and for the SLO; one row of the knee table."""
    study = Study(experiment, allocator, extra)
    rates = grid_rates(experiment)
    for rate in rates:
        study.point(rate)
    grid_rule, grid_slo = sustained(study.frame()), slo_rate(study.frame())
    rule, tried_rule = _refine(grid_rule, rates, study.passes)
    slo, tried_slo = _refine(grid_slo, rates, study.within_slo)
    return {"experiment": experiment, "allocator": allocator, "label": LABELS.get(allocator, allocator),
            "grid_sustained": grid_rule.text(), "sustained": rule.text(), "slo_rate": slo.text(),
            "grid_slo_rate": grid_slo.text(), "runs": len(study.points), "bisection_runs": tried_rule + tried_slo,
            "_rule": rule, "_slo": slo, "_points": study.frame().assign(experiment=experiment, allocator=allocator)}


def ratio_rows(knees: list[dict]) -> list[dict]:
    """paged's sustained rate and SLO rate over each Orca policy's, per experiment."""
    out = []
    by = {(k["experiment"], k["allocator"]): k for k in knees}
    for (experiment, allocator), row in by.items():
        if allocator != "paged":
            continue
        for base in ("orca-oracle", "orca-max"):
            if (experiment, base) in by:
                other = by[(experiment, base)]
                out.append({"experiment": experiment, "paged / base": f"paged (16) / {LABELS[base]}",
                            "sustained (rule)": ratio_text(row["_rule"], other["_rule"]),
                            f"within P99 TTFT <= {SLO_P99_TTFT_S:g} s": ratio_text(row["_slo"], other["_slo"])})
    return out


def _markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", action="append", required=True)
    parser.add_argument("--allocators", default="paged,orca-oracle,orca-max")
    parser.add_argument("--duration", type=float, default=None, help="trace seconds (default: the experiment's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra Hydra override for every run (e.g. system.sample_host_s=1e-6)")
    parser.add_argument("--out", type=Path, default=None, help="CSV of every run's point")
    parser.add_argument("--table", type=Path, default=None, help="markdown of the knees and ratios")
    args = parser.parse_args(argv)
    for experiment in args.experiment:
        if not (CONF_DIR / "experiment" / f"{experiment}.yaml").is_file():
            print(f"--experiment: no conf/experiment/{experiment}.yaml", file=sys.stderr)
            return 2
    extra = (f"seed={args.seed}",) + ((f"workload.duration_s={args.duration:g}",) if args.duration else ()) \
        + tuple(args.override)
    tasks = [(e, a, extra) for e in args.experiment for a in args.allocators.split(",")]
    problem = check_overrides(tasks)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        knees = list(pool.map(knee, *zip(*tasks)))
    table = [{k: v for k, v in row.items() if not k.startswith("_")} for row in knees]
    text = (f"Knees ({', '.join(extra)}; rule and SLO bisected to 1 req/s or 5%):\n\n{_markdown(table)}\n\n"
            f"{_markdown(ratio_rows(knees))}\n")
    print("\n" + text)
    if args.table:
        args.table.write_text(text)
    if args.out:
        pd.concat([k["_points"] for k in knees]).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
