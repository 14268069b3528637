"""How close KV tiers bring the prefix hit rate to the trace's reuse ceiling (issue 34's done-when).

The Mooncake conversation trace's first ``--duration`` seconds, Llama-3-8B (32K context) on one
H100-80GB, ``paged_prefix`` at block size 16: the GPU alone (``offload=none``), host tiers of
1x, 2x, 4x and 8x the GPU's KV bytes, and a disk tier large enough for every block of the window.
Prints one row per run (total token hit rate, per tier, the ceiling) and writes them as JSON:

    PYTHONPATH=. python scripts/offload_ceiling.py [--duration 300] [--out results/offload_ceiling.json]
        [--policies] [--store-order head_first|tail_first]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

BASE = ["model=llama-3-8b", "model.max_model_len=32768", "gpu=h100-80gb", "backend=sim",
        "workload=mooncake_conversation", "allocator=paged_prefix", "allocator.block_size=16",
        "logger=none", "progress=false", "metrics.report=false"]
CASES: dict[str, list[str]] = {
    "gpu-only": ["offload=none"],
    **{f"host-{m}x": ["offload=host", f"offload.host_gpu_multiple={m}.0"] for m in (1, 2, 4, 8)},
    "host-1x+disk-100TB": ["offload=host_disk", "offload.host_gpu_multiple=1.0", "offload.disk_bytes=1.0e14"],
}
# the host tier's eviction policy at 2x the GPU's KV bytes (--policies)
POLICY_CASES: dict[str, list[str]] = {
    f"host-2x-{p}": ["offload=host", "offload.host_gpu_multiple=2.0", f"offload.policy={p}"]
    for p in ("lru", "arc", "lfu", "slru")
}
COLUMNS = ("offload_store_order", "prefix_token_hit_rate", "tier_hit_rate_gpu", "tier_hit_rate_host", "tier_hit_rate_disk",
           "tier_hit_rate_total", "trace_reuse_ceiling", "tier_load_s", "tier_recompute_tokens_saved",
           "num_finished", "num_refused_overlong", "num_preemptions", "mean_ttft_s", "p99_ttft_s", "request_throughput",
           # re-admissions after a preemption, counted apart as vLLM counts them (allocators.prefix_stats)
           "preempted_requests", "preempted_prefix_token_hit_rate", "preempted_tier_hit_rate_total")


def run_case(name: str, overrides: list[str], duration: float, results: Path) -> dict:
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*BASE, *overrides, f"workload.duration_s={duration}",
                                                       f"results_dir={results}", f"experiment_name=offload-{name}"])
    summary = run(cfg)
    return {"case": name, "overrides": overrides, **{key: summary.get(key) for key in COLUMNS}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="replayed gap = trace gap x this (> 1: the same requests, less load)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--policies", action="store_true", help="the host-2x tier under each eviction policy instead")
    parser.add_argument("--store-order", choices=("head_first", "tail_first"), default="head_first",
                        help="offload.store_order of every run with a tier")
    args = parser.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in (POLICY_CASES if args.policies else CASES).items():
            if only and name not in only:
                continue
            order = [f"offload.store_order={args.store_order}"] if overrides != ["offload=none"] else []
            row = run_case(name, [*overrides, *order, f"workload.time_scale={args.time_scale}"], args.duration, Path(tmp))
            rows.append(row)
            total = row["tier_hit_rate_total"] if row["tier_hit_rate_total"] is not None else row["prefix_token_hit_rate"]
            print(f"{name:20s} total hit {total:.4f}  ceiling {row['trace_reuse_ceiling']:.4f}  "
                  f"gpu {row['tier_hit_rate_gpu']}  host {row['tier_hit_rate_host']}  disk {row['tier_hit_rate_disk']}  "
                  f"load_s {row['tier_load_s']}  mean_ttft_s {row['mean_ttft_s']:.3f}  "
                  f"preempted {row['preempted_requests']} (total hit {row['preempted_tier_hit_rate_total']})", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
