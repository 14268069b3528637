"""Byte-identity of the simulator: a fixed set of small sim runs and the hashes of their results.

Each case is a list of Hydra overrides. A case's hashes cover its summary (minus the fields
that change from run to run: identity, wall time, host-side timing), its steps table (minus
``schedule_s``, the engine's own wall time) and its requests table, column by column, exactly
(float bits, dtypes, column order). The reference lives in ``tests/fixtures/sim_identity.json``;
a speed-up must leave every hash unchanged. Regenerate it only for an intended semantic change:

    PYTHONPATH=. .venv/bin/python -m tests.sim_identity --write [--tier fast|slow|all]
    PYTHONPATH=. .venv/bin/python -m tests.sim_identity            # compare, print mismatches
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REFERENCE = Path(__file__).parent / "fixtures" / "sim_identity.json"
# Summary fields that legitimately differ between two runs of the same config.
VOLATILE_SUMMARY = ("run_id", "wall_s", "schedule_s_per_token", "commit", "tree_clean")  # provenance: the code, not its results
VOLATILE_STEPS = ("schedule_s",)
# Columns added after the reference was written, not hashed, so the committed hashes keep covering
# every column they covered; their own tests pin them. Scheduling policies (tests/test_queue_policies.py;
# per-class columns matched by prefix) and issue 37's block-based sharing saving and keep-up test
# (tests/test_keepup.py, tests/test_block_saving.py).
LATER_SUMMARY = ("policy", "preemption_victim", "keep_arrival_order", "aging_bound_s", "sjf_error",
                 "preempt_lost_tokens", "preempt_lost_tokens_per_preempted", "max_queue_wait_s",
                 "num_waited_over_bound", "jain_fairness_normalized_latency", "num_priority_classes",
                 "sharing_saving_block_frac", "served_frac", "ttft_growth",
                 # issue 35: memory per layer group of a mixed model (null on these uniform runs; tests/test_group_memory.py)
                 *(f"mem_{kind}{part}_frac" for kind in ("full", "window", "chunked", "state") for part in ("", "_needed")),
                 "mem_needed_frac",
                 # issue 53: the workload's seed as used (the run's seed unless set; tests/test_seeds.py)
                 "workload_seed",
                 # issue 53: the GPU profile whose operator fit timed the run (tests/test_cost_fit_source.py)
                 "cost_fit_source")
LATER_SUMMARY_PREFIXES = ("prio",)
# issue 53: re-admissions after a preemption counted apart (prefix_hit_rate and prefix_token_hit_rate,
# hashed, now count first admissions only; tests/test_prefix_stats.py pins the new columns)
LATER_LOOKUP = ("prefix_requests",)
LATER_LOOKUP_PREFIXES = ("preempted_",)
# issue 34's offload columns, in every summary since (tests/test_offload.py pins them)
LATER_OFFLOAD_PREFIXES = ("offload", "tier_")
# issue 53: the run's config leaves as recorded settings (tests/test_record_settings.py pins them)
LATER_RECORD_PREFIXES = ("cfg.", "cfg_keys")
LATER_STEPS = ("logical_blocks", "physical_blocks")
LATER_REQUESTS = ("priority", "queue_wait_s", "lost_tokens")

_PRESSURE = "engine.kv_cache_bytes=1.6384e9"  # 2,000 OPT-13B slots: preemptions under load
_PRESSURE_MAX = "engine.kv_cache_bytes=6.7108864e9"  # 8,192 slots: four max-length (2,048) reservations
_SMALL = ["workload.num_requests=24", "progress=false", "logger=none"]


def _case(*overrides: str, requests: int | None = None) -> list[str]:
    base = list(_SMALL) if requests is None else [f"workload.num_requests={requests}", "progress=false", "logger=none"]
    return [*overrides, *base]


ALLOCATORS = ("paged", "paged_prefix", "radix", "contiguous-oracle", "orca-pow2", "orca-oracle", "vattention",
              "vattention-64k", "vattention-256k")
MAX_RESERVING = ("contiguous", "buddy", "orca-max")  # reserve=max: a bigger pool, or nothing fits

# Fast tier: every allocator under pressure, both preemption modes, n > 1, beams, chunking on and
# off, prompt_first and static batching, every workload.
FAST: dict[str, list[str]] = {
    **{f"alloc-{name}": _case(f"allocator={name}", "workload=synthetic", "workload.distribution=lognormal",
                              _PRESSURE) for name in ALLOCATORS},
    **{f"alloc-{name}": _case(f"allocator={name}", "workload=synthetic", "workload.distribution=lognormal",
                              _PRESSURE_MAX) for name in MAX_RESERVING},
    "alloc-contiguous-double": _case("allocator=contiguous", "allocator.reserve=double", "workload=synthetic",
                                     "workload.distribution=lognormal", _PRESSURE),
    "alloc-buddy-double": _case("allocator=buddy", "allocator.reserve=double", "workload=sharegpt", _PRESSURE),
    "alloc-paged_window": _case("allocator=paged_window", "model=phi-3-mini", "workload=synthetic",
                                "workload.distribution=lognormal", "engine.kv_cache_bytes=1.5e9"),
    "swap-paged": _case("allocator=paged", "workload=sharegpt", "engine.preemption=swap", _PRESSURE),
    "swap-buddy": _case("allocator=buddy", "allocator.reserve=double", "workload=sharegpt", "engine.preemption=swap",
                        _PRESSURE),
    "parallel-paged": _case("allocator=paged", "workload=alpaca", "workload.n=4", _PRESSURE),
    "parallel-contiguous": _case("allocator=contiguous", "allocator.reserve=double", "workload=alpaca",
                                 "workload.n=3", _PRESSURE),
    "beam-paged": _case("allocator=paged", "workload=alpaca_synthetic", "workload.beam_width=4", _PRESSURE),
    "beam-paged_prefix-swap": _case("allocator=paged_prefix", "workload=alpaca_synthetic", "workload.beam_width=3",
                                    "engine.preemption=swap", _PRESSURE),
    "nochunk-paged": _case("allocator=paged", "workload=sharegpt", "engine.chunked_prefill=false",
                           "engine.max_num_batched_tokens=4096"),
    "prompt_first-paged": _case("allocator=paged", "workload=sharegpt", "system=vllm-2023", _PRESSURE),
    "prompt_first-orca-max": _case("allocator=orca-max", "workload=sharegpt", "system=vllm-2023"),
    "static-max": _case("+baseline=static-max", "workload=sharegpt"),
    "shared_prefix-paged_prefix": _case("allocator=paged_prefix", "workload=shared_prefix", _PRESSURE),
    "system_prompts-radix": _case("allocator=radix", "workload=system_prompts"),
    "multiturn-radix": _case("allocator=radix", "workload=multiturn", "workload.think_time_s=1.0"),
    "sharegpt_chat-paged_prefix": _case("allocator=paged_prefix", "workload=sharegpt_chat"),
    "rate-paged": _case("allocator=paged", "workload=sharegpt", "workload.request_rate=4.0"),
}

# Slow tier: bigger streams of the same shapes (more steps, deeper pressure).
SLOW: dict[str, list[str]] = {
    **{f"big-{name}": _case(f"allocator={name}", "workload=sharegpt", "workload.request_rate=8.0", _PRESSURE,
                            requests=150) for name in ALLOCATORS},
    **{f"big-{name}": _case(f"allocator={name}", "workload=sharegpt", "workload.request_rate=8.0", _PRESSURE_MAX,
                            requests=150) for name in MAX_RESERVING},
    "big-parallel-paged_prefix-swap": _case("allocator=paged_prefix", "workload=sharegpt", "workload.n=4",
                                            "engine.preemption=swap", _PRESSURE, requests=80),
    "big-beam-buddy": _case("allocator=buddy", "allocator.reserve=pow2", "workload=alpaca_synthetic", "workload.beam_width=4", _PRESSURE,
                            requests=120),
    "big-prompt_first-paged": _case("allocator=paged", "workload=sharegpt", "system=vllm-2023",
                                    "workload.request_rate=6.0", requests=200),
    "big-static-max": _case("+baseline=static-max", "workload=alpaca", requests=150),
    "big-multiturn-paged_prefix": _case("allocator=paged_prefix", "workload=multiturn", requests=120),
}

TIERS = {"fast": FAST, "slow": SLOW}


# -- canonical hashing ---------------------------------------------------------------------
def _value_bytes(value) -> bytes:
    """An exact, type-tagged encoding of one cell (arrays and lists element by element)."""
    if value is None:
        return b"N"
    if isinstance(value, np.ndarray) and value.dtype == object:  # nested (a list of per-sample arrays)
        return b"O" + _value_bytes(list(value))
    if isinstance(value, np.ndarray):
        return b"A" + str(value.dtype).encode() + str(value.shape).encode() + np.ascontiguousarray(value).tobytes()
    if isinstance(value, (list, tuple)):
        return b"L" + str(len(value)).encode() + b"[" + b",".join(_value_bytes(v) for v in value) + b"]"
    if isinstance(value, (bool, np.bool_)):
        return b"B1" if value else b"B0"
    if isinstance(value, (int, np.integer)):
        return b"I" + str(int(value)).encode()
    if isinstance(value, (float, np.floating)):
        return b"F" + struct.pack("<d", float(value))
    if isinstance(value, str):
        return b"S" + value.encode()
    raise TypeError(f"cannot hash a cell of type {type(value).__name__}")


def frame_hash(frame: pd.DataFrame, drop: tuple[str, ...] = ()) -> str:
    """Hash of a table's column names, dtypes and exact values, in column order."""
    h = hashlib.sha256()
    h.update(str(len(frame)).encode())
    for name in frame.columns:
        if name in drop:
            continue
        col = frame[name]
        h.update(b"|" + str(name).encode() + b":" + str(col.dtype).encode() + b":")
        values = col.to_numpy()
        if values.dtype.kind in "biuf":
            h.update(np.ascontiguousarray(values).tobytes())
        else:
            for value in values:
                h.update(_value_bytes(value) + b";")
    return h.hexdigest()


def summary_hash(summary: dict) -> str:
    row = {k: v for k, v in summary.items() if k not in VOLATILE_SUMMARY and k not in LATER_SUMMARY
           and not (k.startswith(LATER_SUMMARY_PREFIXES) and k[len("prio"):len("prio") + 1].isdigit())
           and not k.startswith(LATER_OFFLOAD_PREFIXES) and k not in LATER_LOOKUP
           and not k.startswith(LATER_LOOKUP_PREFIXES)}
    row = {k: v for k, v in row.items() if not k.startswith(LATER_RECORD_PREFIXES)}
    for k, v in row.items():  # float bits, not their shortest repr
        if isinstance(v, float) and not math.isnan(v):
            row[k] = struct.pack("<d", v).hex()
    return hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()


def run_hashes(overrides: list[str]) -> dict[str, str]:
    """Run one case through the app as a user would and hash the files it wrote."""
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR
    from kvbench.results.store import load_requests, load_steps, load_summary

    with tempfile.TemporaryDirectory() as tmp:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[*overrides, f"results_dir={tmp}",
                                                            "experiment_name=sim-identity"])
        run_dir = Path(tmp) / "run"
        run(cfg, run_dir=run_dir, run_id="sim-identity")
        return {"summary": summary_hash(load_summary(run_dir)),
                "steps": frame_hash(load_steps(run_dir), VOLATILE_STEPS + LATER_STEPS),
                "requests": frame_hash(load_requests(run_dir), LATER_REQUESTS)}


def load_reference() -> dict:
    return json.loads(REFERENCE.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=("fast", "slow", "all"), default="all")
    parser.add_argument("--write", action="store_true", help="rewrite the reference (intended semantic change only)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args(argv)
    tiers = ("fast", "slow") if args.tier == "all" else (args.tier,)
    only = {n for n in args.only.split(",") if n}
    reference = load_reference() if REFERENCE.is_file() else {"fast": {}, "slow": {}}
    bad = 0
    for tier in tiers:
        for name, overrides in TIERS[tier].items():
            if only and name not in only:
                continue
            got = run_hashes(overrides)
            want = reference.get(tier, {}).get(name)
            if args.write:
                reference.setdefault(tier, {})[name] = got
                print(f"{tier:<5} {name:<30} written", flush=True)
                continue
            diff = [k for k in got if want is None or want.get(k) != got[k]]
            bad += bool(diff)
            print(f"{tier:<5} {name:<30} {'ok' if not diff else 'DIFFERS: ' + ', '.join(diff)}", flush=True)
    if args.write:
        REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
