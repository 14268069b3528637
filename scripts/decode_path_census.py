"""How many engine steps of the paper's simulated runs are pure decode (every sequence on the
scheduler's decode fast path, or in a decode run), and what sends the others down the general path.

Each sampled committed run (``scripts/verify_results.py``'s sample: ``--per-experiment``,
``--max-wall``) is rerun from its recorded overrides with ``Scheduler.schedule`` and
``DecodeRuns.advance`` wrapped; each step is classed by its batch:

    run         taken by a decode run (``kvbench/engine/decode_run.py``: many steps at once);
    decode      every chunk came from the decode fast path, no copy, swap or preemption;
    prefill     a prompt (or a recompute) chunk of more than one token, or a token without sampling;
    preempt     the step preempted a group;
    swap/copy   swap-in/out or copy-on-write operations;
    other       one-token steps off the fast path (forks to make, beams, parallel samples, EOS).

A step counts in the first class that applies, in the order preempt, swap/copy, prefill, other.
Prints one line per run and the totals (steps and sequence-steps). One run per experiment under
30 s of recorded wall time: 14 reruns took 15 minutes on the shared 2 cores (use --experiment).

    PYTHONPATH=. python scripts/decode_path_census.py [--root results/paper] [--per-experiment 1]
        [--max-wall 30] [--seed 0] [--experiment NAME ...]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("run", "decode", "prefill", "preempt", "swap/copy", "other")


def _verify_results():
    spec = importlib.util.spec_from_file_location("verify_results", REPO / "scripts" / "verify_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["verify_results"] = module
    spec.loader.exec_module(module)
    return module


def step_class(sched, batch) -> str:
    """The class of one scheduled batch (see the module docstring)."""
    if sched.preempted_now:
        return "preempt"
    if batch.swap_out or batch.swap_in or batch.copy_ops:
        return "swap/copy"
    if any(len(c.token_ids) != 1 or not c.sample for c in batch.chunks):
        return "prefill"
    if sched.plain_decodes == len(batch.chunks):
        return "decode"
    return "other"


def census(cfg) -> tuple[Counter, Counter]:
    """(steps, sequence-steps) of one run by class."""
    from kvbench.engine.decode_run import DecodeRuns
    from kvbench.engine.scheduler import Scheduler
    from kvbench.run.lifecycle import run

    steps, seq_steps = Counter(), Counter()
    inner, inner_runs = Scheduler.schedule, DecodeRuns.advance

    def counted(self):
        batch = inner(self)
        if batch.chunks or batch.swap_out or batch.swap_in:  # an empty batch is no engine step
            kind = step_class(self, batch)
            steps[kind] += 1
            seq_steps[kind] += len(batch.chunks)
        return batch

    def counted_runs(self, *args, **kwargs):
        running = len(self.sched.running)
        done, now, ended = inner_runs(self, *args, **kwargs)
        steps["run"] += done
        seq_steps["run"] += done * running
        return done, now, ended

    Scheduler.schedule, DecodeRuns.advance = counted, counted_runs
    try:
        with tempfile.TemporaryDirectory(prefix="kvbench-census-") as tmp:
            run(cfg, run_dir=Path(tmp) / "run")
    finally:
        Scheduler.schedule, DecodeRuns.advance = inner, inner_runs
    return steps, seq_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / "results" / "paper")
    parser.add_argument("--per-experiment", type=int, default=1)
    parser.add_argument("--max-wall", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--experiment", nargs="*", default=[])
    args = parser.parse_args()
    vr = _verify_results()
    paths = vr.sample(vr.committed_runs(args.root), 0, args.seed, args.max_wall, args.experiment,
                      per_experiment=args.per_experiment)
    if not paths:
        print(f"no simulated runs under {args.root} pass the filters", file=sys.stderr)
        raise SystemExit(2)
    total_steps, total_seq = Counter(), Counter()
    print(f"{'run':<58} {'steps':>7} " + " ".join(f"{c:>9}" for c in CLASSES) + "  (share of steps)")
    for path in paths:
        row, _ = vr._read_summary(path)
        recorded = row.get("overrides")
        if not recorded:
            print(f"{path.parent.name}: no recorded overrides, skipped")
            continue
        overrides = [o for o in json.loads(recorded) if not o.startswith(("hydra", "results_dir="))]
        with tempfile.TemporaryDirectory(prefix="kvbench-census-") as tmp:
            cfg = vr.compose(overrides, tmp)
        steps, seq_steps = census(cfg)
        total_steps += steps
        total_seq += seq_steps
        n = sum(steps.values()) or 1
        label = f"{row['experiment']}/{row.get('allocator_label')}"[:58]
        print(f"{label:<58} {n:>7} " + " ".join(f"{steps[c] / n:>9.1%}" for c in CLASSES), flush=True)
    for name, counter in (("steps", total_steps), ("sequence-steps", total_seq)):
        n = sum(counter.values()) or 1
        print(f"{'all runs, ' + name:<58} {n:>7} " + " ".join(f"{counter[c] / n:>9.1%}" for c in CLASSES))


if __name__ == "__main__":
    main()
