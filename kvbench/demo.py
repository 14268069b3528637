"""`make demo`: every allocator on the same simulated ShareGPT workload, side by side.

OPT-13B on one A100-40GB (the PagedAttention paper's first setup), the same requests and the
same KV memory for each run; only the allocator changes. Rows go to results/index.jsonl.
"""
from __future__ import annotations

import sys

from hydra import compose, initialize_config_dir

from kvbench.app import format_table, run
from kvbench.config import CONF_DIR

RUNS = [
    ("contiguous", ["allocator=contiguous", "allocator.reserve=max"]),
    ("contiguous", ["allocator=contiguous", "allocator.reserve=pow2"]),
    ("contiguous", ["allocator=contiguous", "allocator.reserve=oracle"]),
    ("buddy", ["allocator=buddy", "allocator.reserve=max"]),
    ("paged", ["allocator=paged", "allocator.block_size=16"]),
    ("paged_prefix", ["allocator=paged_prefix", "allocator.block_size=16"]),
]
COMMON = ["experiment_name=demo", "backend=sim", "model=opt-13b", "gpu=a100-40gb", "workload=sharegpt",
          "workload.num_requests=1500", "workload.request_rate=3.0", "logger=none"]


def main(argv: list[str] | None = None) -> None:
    extra = list(argv if argv is not None else sys.argv[1:])
    rows = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for label, overrides in RUNS:
            cfg = compose(config_name="config", overrides=COMMON + overrides + extra)
            summary = run(cfg)
            rows.append(summary)
            print(f"  {label:<13} {summary.get('reserve') or '':<7} done in {summary['wall_s']:.1f} s", flush=True)
    print()
    print(f"OPT-13B on A100-40GB (simulated), ShareGPT at 3 req/s, {rows[0]['num_requests']} requests, "
          f"the same {rows[0]['kv_slots']}-slot KV pool ({rows[0]['kv_bytes'] / 1e9:.1f} GB) for every allocator:")
    print(format_table(rows))


if __name__ == "__main__":
    main()
