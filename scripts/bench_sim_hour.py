"""Wall time of a simulated hour: ShareGPT at 2 req/s, OPT-13B on one A100-40GB, per allocator.

    .venv/bin/python scripts/bench_sim_hour.py [--duration-s 3600] [--allocators paged,orca-max]

Issue target: under 60 s of wall time on one core for the paged allocator.
"""
from __future__ import annotations

import argparse
import time

from hydra import compose, initialize_config_dir

from kvbench.app import run
from kvbench.config import CONF_DIR

ALLOCATORS = ["paged", "paged_prefix", "orca-max", "orca-pow2", "orca-oracle", "contiguous"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=3600)
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--results-dir", default="results/bench")
    args = parser.parse_args()
    rows = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for name in args.allocators.split(","):
            cfg = compose(config_name="config", overrides=[
                f"allocator={name}", "model=opt-13b", "gpu=a100-40gb", "backend=sim", "workload=sharegpt",
                "workload.request_rate=2.0", f"workload.duration_s={args.duration_s}", "progress=false",
                "experiment_name=bench-sim-hour", f"results_dir={args.results_dir}"])
            t0 = time.perf_counter()
            summary = run(cfg)
            wall = time.perf_counter() - t0
            rows.append((name, summary["num_requests"], summary["num_steps"], wall, summary["mean_batch_size"]))
            print(f"{name:<13} {summary['num_requests']:>6} requests {summary['num_steps']:>7} steps "
                  f"{wall:7.1f} s wall  ({1e6 * wall / summary['num_steps']:.0f} us/step)", flush=True)


if __name__ == "__main__":
    main()
