"""`make demo`: every allocator that applies, on the same simulated ShareGPT stream, side by side.

OPT-13B on one A100-40GB (the PagedAttention paper's first setup), ShareGPT lengths (prompts
are random ids of the real lengths) at 3 req/s, Poisson arrivals; the same requests and the
same KV memory for each run, only the allocator changes. Every ``conf/allocator`` config runs
except ``buddy`` (the same knobs as ``orca-max``) and ``paged_window`` (it frees blocks that
left a sliding window, and OPT-13B attends to its whole context). Rows whose numbers coincide are named with the reason. Rows go to
results/index.jsonl.
"""
from __future__ import annotations

import sys

from hydra import compose, initialize_config_dir

from kvbench.config.errors import CONF_DIR
from kvbench.results.naming import cell
from kvbench.run.console import format_table
from kvbench.run.lifecycle import run

ALLOCATORS = ("orca-max", "orca-pow2", "orca-oracle", "contiguous", "contiguous-oracle", "paged",
              "paged_prefix", "radix", "vattention", "vattention-64k", "vattention-256k")
LEFT_OUT = {"buddy": "the same knobs as orca-max (buddy, reserve=max)",
            "vllm-v1": "vLLM's own KV manager, an optional extra (make peers)",
            "paged_window": "frees blocks that left a sliding window; OPT-13B has none",
            **{name: "pages a mixed model's layer groups; on OPT-13B (uniform) it equals paged"
               for name in ("uniform", "hybrid_static", "hybrid", "lcm")},
            **{name: "prefix caching over a mixed model's layer groups; on OPT-13B (uniform) it runs as paged_prefix"
               for name in ("hybrid_prefix", "lcm_prefix")}}
COMMON = ["experiment_name=demo", "backend=sim", "model=opt-13b", "gpu=a100-40gb", "workload=sharegpt",
          "workload.num_requests=1500", "workload.request_rate=3.0", "logger=none", "progress=false"]
COMPARED = ("request_throughput", "mean_batch_size", "mem_token_frac", "mem_internal_frac", "mem_external_frac",
            "num_preemptions", "mean_ttft_ms")


def coinciding(rows: list[dict]) -> list[list[str]]:
    """Labels of rows whose compared numbers are all equal (to 4 significant digits)."""
    by_numbers: dict[tuple, list[str]] = {}
    for row in rows:
        by_numbers.setdefault(tuple(cell(row.get(k)) for k in COMPARED), []).append(str(row["allocator_label"]))
    return [labels for labels in by_numbers.values() if len(labels) > 1]


def why(labels: list[str], rows: list[dict]) -> str:
    """The reason some rows coincide, where the harness knows it."""
    group = [r for r in rows if r["allocator_label"] in labels]
    prefix = [r for r in group if r["allocator"] in ("paged_prefix", "radix")]
    if prefix and all(not r.get("prefix_hit_rate") for r in prefix):
        return "no two prompts share a prefix here, so the prefix caches find nothing to share and act as paged"
    if len(prefix) == len(group) and len({r.get("block_size") for r in group}) == 1:
        hit = float(group[0].get("prefix_hit_rate") or 0.0)
        return (f"both prefix caches hit the same blocks ({hit:.0%}) at the same block size; the prompts are "
                "random ids sharing no prefix, so every hit is a preempted request recomputing its own prompt")
    if all(r["allocator"] in ("contiguous", "buddy") for r in rows if r["allocator_label"] in labels):
        return "the same reservation policy; at this load the region layout never refuses a request"
    return "the same admissions at every step"


def main(argv: list[str] | None = None) -> None:
    extra = list(argv if argv is not None else sys.argv[1:])
    rows = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for label in ALLOCATORS:
            cfg = compose(config_name="config", overrides=COMMON + [f"allocator={label}"] + extra)
            summary = run(cfg)
            summary["allocator_label"] = label
            rows.append(summary)
            print(f"  {label:<18} done in {summary['wall_s']:.1f} s", flush=True)
    first = rows[0]
    print()
    print(f"OPT-13B on A100-40GB (simulated), {first['num_requests']} ShareGPT requests (real lengths, random ids) "
          f"at 3 req/s (Poisson), the same {first['kv_slots']}-slot KV pool ({first['kv_bytes'] / 1e9:.1f} GB) "
          f"for each of the {len(rows)} allocator configs:")
    print(format_table(rows))
    for labels in coinciding(rows):
        print(f"{', '.join(labels)}: identical rows ({why(labels, rows)})")
    for label, reason in LEFT_OUT.items():
        print(f"{label} left out: {reason}")


if __name__ == "__main__":
    main()
