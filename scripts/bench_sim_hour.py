"""Engine cost of the simulator per step and per sequence-step, for each allocator.

Scenarios, OPT-13B on one A100-40GB (``backend=sim``; the modern system unless said):

    hour     a simulated hour of ShareGPT at 2 req/s (``--duration-s`` shortens it);
    full     full load: ``--full-requests`` (1,000) ShareGPT requests at t=0 in 14,720 slots, block 16;
    paper    the paper's rate study: paper-era vLLM (``system=vllm-2023``), 12 GiB of KV, ShareGPT
             at 2 req/s for ``--duration-s``;
    crowded  the paper's batch study: paper-era vLLM, 12 GiB, Alpaca at 30 req/s for 10 minutes
             (about 190 running, preemptions every few steps).

Only ``Engine.run`` is timed (the step loop and the tables it builds), not the config, the
workload or the files; in CPU time of the process (``time.process_time``), which time spent
waiting for a busy shared core does not inflate. A sequence-step is one sequence in one step's batch (``num_seqs``).
``--baseline COMMIT`` checks that commit out into a temporary git worktree and times it too, in
the same run, alternating tree by tree for each allocator and round; the worktree is removed
afterwards. Each measurement runs in a fresh process with the tree on ``PYTHONPATH``.

    PYTHONPATH=. .venv/bin/python scripts/bench_sim_hour.py [--scenarios hour,full] \
        [--allocators paged,orca-max] [--rounds 1] [--baseline 1c89f11]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALLOCATORS = ["paged", "paged_prefix", "orca-max", "orca-pow2", "orca-oracle", "contiguous"]
SLOTS_FULL = 14_720
BYTES_PER_SLOT_OPT13B = 819_200  # 40 layers x 5,120 x 2 (K and V) x 2 bytes
PAPER_KV_BYTES = 12_884_901_888  # the paper experiments' engine.kv_cache_bytes (12 GiB)
REPO = Path(__file__).resolve().parents[1]


def overrides(scenario: str, allocator: str, duration_s: float, full_requests: int) -> list[str]:
    common = [f"allocator={allocator}", "model=opt-13b", "gpu=a100-40gb", "backend=sim", "workload=sharegpt",
              "progress=false", "logger=none", "experiment_name=bench-sim"]
    if scenario == "hour":
        return [*common, "workload.request_rate=2.0", f"workload.duration_s={duration_s}"]
    if scenario == "full":
        return [*common, f"workload.num_requests={full_requests}",
                f"engine.kv_cache_bytes={SLOTS_FULL * BYTES_PER_SLOT_OPT13B}", "allocator.block_size=16"]
    paper_era = ["system=vllm-2023", f"engine.kv_cache_bytes={PAPER_KV_BYTES}"]
    if scenario == "paper":
        return [*common, *paper_era, "workload.request_rate=2.0", f"workload.duration_s={duration_s}"]
    if scenario == "crowded":
        return [*(o for o in common if o != "workload=sharegpt"), *paper_era, "workload=alpaca",
                "workload.request_rate=30", "workload.duration_s=600"]
    raise SystemExit(f"unknown scenario {scenario!r}; allowed: hour, full, paper, crowded")


def worker(args: argparse.Namespace) -> None:
    """One timed run in this process (the tree on PYTHONPATH is the one measured); prints JSON."""
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR
    from kvbench.engine import Engine

    timed: dict[str, float] = {}
    engine_run = Engine.run

    def timed_run(self, requests):
        t0, c0 = time.perf_counter(), time.process_time()
        out = engine_run(self, requests)
        timed["wall_s"] = time.perf_counter() - t0
        timed["engine_s"] = time.process_time() - c0  # CPU time: waiting for a shared core is not counted
        timed["steps"] = len(out.steps)
        timed["seq_steps"] = int(out.steps["num_seqs"].sum()) if len(out.steps) else 0
        return out

    Engine.run = timed_run
    with tempfile.TemporaryDirectory() as tmp:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                *overrides(args.scenario, args.worker, args.duration_s, args.full_requests), f"results_dir={tmp}"])
        run(cfg, run_dir=Path(tmp) / "run", run_id="bench")
    print(json.dumps(timed))


def measure(tree: Path, scenario: str, allocator: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", allocator, "--scenario", scenario,
           "--duration-s", str(args.duration_s), "--full-requests", str(args.full_requests)]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree.name} {scenario} {allocator} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def per_unit(m: dict[str, float]) -> tuple[float, float]:
    """(us per step, us per sequence-step)."""
    return 1e6 * m["engine_s"] / max(m["steps"], 1), 1e6 * m["engine_s"] / max(m["seq_steps"], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="hour,full")
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--duration-s", type=float, default=3600)
    parser.add_argument("--full-requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1, help="measurements per tree; the median is shown")
    parser.add_argument("--baseline", default=None, help="a commit to time beside this tree (same run)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scenario", default="hour", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    trees = {"now": REPO}
    base_dir = None
    if args.baseline:
        base_dir = Path(tempfile.mkdtemp(prefix="kvbench-baseline-")) / "tree"
        added = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base_dir),
                                args.baseline], capture_output=True, text=True)
        if added.returncode:
            base_dir.parent.rmdir()  # the empty folder made above
            why = (added.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            print(f"bench_sim_hour: error: --baseline {args.baseline}: {why}", file=sys.stderr)
            raise SystemExit(2)
        trees = {"base": base_dir, "now": REPO}
    try:
        header = f"{'scenario':<8} {'allocator':<13} {'steps':>8} {'seq-steps':>10}"
        for label in trees:
            header += f" {label + ' us/step':>14} {label + ' us/seq':>12}"
        if args.baseline:
            header += f" {'speed-up/seq':>12}"
        print(header, flush=True)
        for scenario in args.scenarios.split(","):
            for allocator in args.allocators.split(","):
                runs: dict[str, list[dict]] = {label: [] for label in trees}
                for _ in range(args.rounds):
                    for label, tree in trees.items():  # alternating: drift slows both alike
                        runs[label].append(measure(tree, scenario, allocator, args))
                first = runs["now"][0]
                line = f"{scenario:<8} {allocator:<13} {first['steps']:>8} {first['seq_steps']:>10}"
                seq_us = {}
                for label, ms in runs.items():
                    step_us = statistics.median(per_unit(m)[0] for m in ms)
                    seq_us[label] = statistics.median(per_unit(m)[1] for m in ms)
                    line += f" {step_us:>14.1f} {seq_us[label]:>12.2f}"
                if args.baseline:
                    line += f" {seq_us['base'] / seq_us['now']:>11.2f}x"
                print(line, flush=True)
    finally:
        if base_dir is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_dir)], check=False)
            base_dir.parent.rmdir()


if __name__ == "__main__":
    main()
