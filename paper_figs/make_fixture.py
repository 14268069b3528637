"""Write the small synthetic results store that the figure tests read.

    python -m paper_figs.make_fixture [OUT]        (default tests/fixtures/results_small)

Every run goes through ``kvbench.results.store.write_run``, so the index, ``summary.json`` and the
parquet files have the store's real format. The numbers are made up (shaped like the
PagedAttention paper's results) and deterministic: rerunning rewrites the same files.

To stay small (parquet files carry ~0.5 KB of metadata per column), only the runs whose figures
read per-step timings (token_time, and one block-size run without ``attention_s_per_token``)
carry the recorder's full step columns; the others carry a thin steps table (a few of the
recorder's columns) and a thin requests table.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kvbench.engine.recorder import MEM_KEYS, TIMING_KEYS
from kvbench.results.store import write_run

DEFAULT_OUT = Path("tests/fixtures/results_small")

# kvbench/engine/recorder.py, Recorder.step, in its order
STEP_COLUMNS = (
    "step", "time_s", "step_s", "batch_size", "num_seqs", "num_tokens", "num_prefill_tokens",
    "num_running", "num_waiting", "num_swapped", "num_preemptions", *MEM_KEYS, "logical_slots",
    "token_slots", "copy_slots", *TIMING_KEYS,
)  # fmt: skip

ORCA_MAX = ("buddy", "max", 16)
ORCA_POW2 = ("buddy", "pow2", 16)
ORCA_ORACLE = ("buddy", "oracle", 16)
PAGED = ("paged", None, 16)
PREFIX = ("paged_prefix", None, 16)

# token, reserved, internal, external share of the pool (sums to 1)
MEMORY = {
    ORCA_MAX: (0.21, 0.27, 0.44, 0.08),
    ORCA_POW2: (0.27, 0.25, 0.34, 0.14),
    ORCA_ORACLE: (0.55, 0.30, 0.02, 0.13),
    PAGED: (0.93, 0.01, 0.03, 0.03),
    PREFIX: (0.95, 0.01, 0.03, 0.01),
}
NUM_SLOTS = 192  # memmap pool
MAX_LEN = 64  # Orca (Max) reservation in the memmap


def _base(run_id: str, experiment: str, alloc: tuple, **values) -> dict:
    allocator, reserve, block_size = alloc
    token, reserved, internal, external = MEMORY.get(alloc, MEMORY[PAGED])
    row = {
        "run_id": run_id, "experiment": experiment, "allocator": allocator, "reserve": reserve,
        "block_size": block_size, "backend": "sim", "device": "cpu", "gpu_profile": "a100-40gb",
        "model": "opt-13b", "workload": "sharegpt", "request_rate": 1.0, "num_requests": 4,
        "kv_slots": 2048, "kv_bytes": 2048 * 819200, "seed": 0,
        "mem_token_frac": token, "mem_reserved_frac": reserved,
        "mem_internal_frac": internal, "mem_external_frac": external,
        "num_preemptions": 0, "num_finished": 4, "num_rejected": 0,
        "n": 1, "beam_width": 1, "prefix_len": None, "preemption": "recompute",
    }  # fmt: skip
    row.update(values)
    return row


def _thin(extra_step_columns: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = pd.DataFrame({"step": np.arange(3), "step_s": [0.05] * 3})
    for name, values in (extra_step_columns or {}).items():
        steps[name] = values
    requests = pd.DataFrame({"output_len": [8, 12, 16, 20], "n": [1] * 4})
    return steps, requests


def _timed_steps(block_size: int, contiguous: bool, scale: float) -> pd.DataFrame:
    """Full recorder columns; timings in seconds, attention slower for tiny blocks."""
    num = 6
    steps = {c: np.zeros(num) for c in STEP_COLUMNS}
    steps["step"] = np.arange(num)
    steps["batch_size"] = np.array([2, 4, 4, 4, 3, 2])
    steps["num_seqs"] = steps["batch_size"]
    steps["num_tokens"] = np.array([40, 4, 4, 4, 3, 2])
    steps["num_prefill_tokens"] = np.array([40, 0, 0, 0, 0, 0])
    steps["num_running"] = steps["batch_size"]
    token = np.linspace(0.3, 0.6, num)
    steps["mem_token_frac"] = token
    steps["mem_internal_frac"] = np.full(num, 0.4 if contiguous else 0.03)
    steps["mem_reserved_frac"] = np.full(num, 0.1 if contiguous else 0.0)
    steps["mem_external_frac"] = 1 - token - steps["mem_internal_frac"] - steps["mem_reserved_frac"]
    steps["token_slots"] = (token * 2048).round()
    steps["logical_slots"] = steps["token_slots"]
    gather = 1.0 + 2.0 / block_size  # short runs of K/V bytes waste bandwidth
    steps["attention_s"] = scale * 0.004 * gather * steps["batch_size"]
    steps["forward_s"] = scale * (0.012 + 0.0004 * steps["num_tokens"])
    steps["sampling_s"] = np.full(num, scale * 0.0015)
    steps["copy_s"] = np.where(np.arange(num) == 3, scale * (0.002 if contiguous else 0.0002), 0.0)
    steps["swap_s"] = np.zeros(num)
    steps["schedule_s"] = np.full(num, 0.0008 if contiguous else 0.0012)
    parts = sum(steps[k] for k in TIMING_KEYS[:-1])
    steps["step_s"] = parts + scale * 0.001  # the unattributed rest
    steps["time_s"] = np.concatenate([[0.0], np.cumsum(steps["step_s"])[:-1]])
    frame = pd.DataFrame(steps)
    int_cols = [c for c in STEP_COLUMNS if c not in MEM_KEYS + TIMING_KEYS + ("time_s", "step_s")]
    return frame.astype({c: "int64" for c in int_cols})[list(STEP_COLUMNS)]


def _memmap(alloc: tuple, seed: int) -> dict[str, np.ndarray]:
    """Snapshots of a toy pool: requests arrive, grow one token a snapshot, finish."""
    rng = np.random.default_rng(seed)
    snaps = 48
    prompt = rng.integers(4, 16, size=24)
    final = prompt + rng.integers(6, 40, size=24)
    arrive = np.sort(rng.integers(0, snaps - 8, size=24))
    category = np.zeros((snaps, NUM_SLOTS), np.int8)
    owner = np.full((snaps, NUM_SLOTS), -1, np.int32)
    block = 16
    held: dict[int, list[int]] = {}  # request -> its slots, in order
    free_blocks = list(rng.permutation(NUM_SLOTS // block))
    contiguous = alloc[0] != "paged"
    for t in range(snaps):
        for r in list(held):
            if prompt[r] + (t - arrive[r]) > final[r]:  # finished
                slots = held.pop(r)
                if not contiguous:
                    free_blocks.extend(sorted({s // block for s in slots}))
        for r in np.flatnonzero(arrive == t):
            if contiguous:  # first fit of MAX_LEN slots
                used = np.zeros(NUM_SLOTS, bool)
                for s in held.values():
                    used[s] = True
                for start in range(0, NUM_SLOTS - MAX_LEN + 1, block):
                    if not used[start:start + MAX_LEN].any():
                        held[r] = list(range(start, start + MAX_LEN))
                        break
            elif free_blocks:
                held[r] = []
        for r, slots in held.items():
            length = min(prompt[r] + (t - arrive[r]), final[r])
            if not contiguous:  # paged: grow block by block, on demand
                while len(slots) < length and free_blocks:
                    b = free_blocks.pop(0)
                    slots.extend(range(b * block, (b + 1) * block))
            for i, s in enumerate(slots):
                owner[t, s] = r
                category[t, s] = 1 if i < length else (2 if i < final[r] else 3)
    return {"time_s": np.round(np.arange(snaps) * 0.25, 3), "category": category, "owner": owner}


def runs() -> list[tuple[dict, pd.DataFrame, pd.DataFrame, dict | None]]:
    """(summary, steps, requests, memmap arrays or None) for every fixture run."""
    out = []

    def add(summary, tables=None, memmap=None):
        steps, requests = tables if tables is not None else _thin()
        out.append((summary, steps, requests, memmap))

    exp = "paper-breakdown"
    for i, alloc in enumerate((ORCA_MAX, ORCA_POW2, ORCA_ORACLE, PAGED, PREFIX)):
        add(_base(f"{exp}-{i}", exp, alloc))

    exp = "paper-batch"
    for i, alloc in enumerate((ORCA_MAX, ORCA_ORACLE, PAGED)):
        for workload, scale in (("sharegpt", 1.0), ("alpaca", 3.0)):
            batch = round(32 * MEMORY[alloc][0] * scale, 2)
            add(_base(f"{exp}-{i}-{workload}", exp, alloc, workload=workload,
                      mean_batch_size=batch, max_batch_size=math.ceil(batch * 1.5)))

    exp = "paper-rate-opt13b-sharegpt"
    for i, alloc in enumerate((ORCA_MAX, PAGED)):
        capacity = 2.6 * MEMORY[alloc][0] + 0.3  # requests/s it sustains
        for rate in (0.5, 1.0, 2.0):
            latency = 0.04 + 0.02 / max(capacity - rate, 0.02) ** 0.5 if rate < capacity else 1.5 * rate
            add(_base(f"{exp}-{i}-{rate}", exp, alloc, request_rate=rate,
                      normalized_latency_s=round(latency, 4),
                      request_throughput=round(min(rate, capacity), 3)))

    exp = "paper-sharing"
    for i, (n, beam, prefix, saving, workload) in enumerate((
        (1, 1, None, 0.0, "sharegpt"), (2, 1, None, 0.07, "sharegpt"), (4, 1, None, 0.10, "sharegpt"),
        (1, 4, None, 0.45, "sharegpt"), (1, 1, 32, 0.31, "shared_prefix"), (1, 1, 128, 0.58, "shared_prefix"),
    )):  # fmt: skip
        add(_base(f"{exp}-{i}", exp, PREFIX, n=n, beam_width=beam, prefix_len=prefix,
                  sharing_saving_frac=saving, workload=workload))

    exp = "paper-block-size"
    for block in (1, 16, 256):
        alloc = ("paged", None, block)
        waste = round(0.5 * block / (block + 48), 4)
        summary = _base(f"{exp}-{block}", exp, alloc, mem_internal_frac=waste,
                        mem_token_frac=0.97 - waste, mem_external_frac=0.03, mem_reserved_frac=0.0,
                        request_throughput=round(1.9 - 0.5 / block - 0.8 * waste, 3))
        if block == 16:  # no extra column: the figure falls back to the steps' attention_s
            add(summary, _thin({"attention_s": [0.01, 0.012, 0.011]}))
        else:
            summary["attention_s_per_token"] = 0.0008 * (1 + 2.0 / block)
            add(summary)

    exp = "paper-pressure"
    for mode in ("recompute", "swap"):
        for gb in (1, 2, 4):
            preempt = round(40 / gb) + (6 if mode == "swap" else 0)
            add(_base(f"{exp}-{mode}-{gb}", exp, PAGED, preemption=mode, kv_bytes=gb * 10**9,
                      kv_slots=gb * 1220, num_preemptions=preempt,
                      normalized_latency_s=round(0.05 + 0.004 * preempt * (1.3 if mode == "swap" else 1), 4)))

    exp = "paper-memmap"
    for i, alloc in enumerate((ORCA_MAX, PAGED)):
        add(_base(f"{exp}-{i}", exp, alloc, kv_slots=NUM_SLOTS), memmap=_memmap(alloc, seed=1))

    def latency(rate: float, capacity: float) -> float:
        return round(0.04 + 0.02 / max(capacity - rate, 0.02) ** 0.5 if rate < capacity else 1.5 * rate, 4)

    for exp, knob in (("paper-rate-parallel", "n"), ("paper-rate-beam", "beam_width")):
        for i, alloc in enumerate((ORCA_ORACLE, PAGED)):
            for width in (2, 4):
                for rate in (1.0, 2.0):
                    add(_base(f"{exp}-{i}-{width}-{rate}", exp, alloc, workload="alpaca-synthetic",
                              request_rate=rate, **{knob: width},
                              normalized_latency_s=latency(rate, 3 * MEMORY[alloc][0] / width)))
    exp = "paper-rate-prefix"
    for i, alloc in enumerate((ORCA_ORACLE, PAGED, PREFIX)):
        for prefix in (80, 341):
            for rate in (1.0, 2.0):
                add(_base(f"{exp}-{i}-{prefix}-{rate}", exp, alloc, workload="shared_prefix", prefix_len=prefix,
                          request_rate=rate, normalized_latency_s=latency(rate, 2.5 * MEMORY[alloc][0])))
    exp = "paper-rate-chat"
    for i, alloc in enumerate((ORCA_MAX, PAGED)):
        for rate in (0.5, 1.0):
            add(_base(f"{exp}-{i}-{rate}", exp, alloc, workload="sharegpt-chat", request_rate=rate,
                      normalized_latency_s=latency(rate, 1.5 * MEMORY[alloc][0]), mean_prompt_len=700.0,
                      median_prompt_len=800.0, mean_output_len=300.0, median_output_len=250.0))
    for workload, rates in (("sharegpt", (1.0, 2.0)), ("alpaca-synthetic", (15.0, 30.0))):
        for block in (1, 16, 256):
            for rate in rates:
                add(_base(f"paper-block-rate-{workload}-{block}-{rate}", "paper-block-rate", ("paged", None, block),
                          workload=workload, request_rate=rate,
                          normalized_latency_s=round(0.05 + 0.01 * rate / rates[0] + 0.02 / block + block / 5000, 4)))
    for mode in ("recompute", "swap"):
        for block in (1, 16, 256):
            add(_base(f"paper-preempt-block-{mode}-{block}", "paper-preempt-block", ("paged", None, block),
                      preemption=mode, request_rate=2.5,
                      normalized_latency_s=round(0.06 + (0.05 / block if mode == "swap" else 0.004), 4)))
    exp = "paper-announce"
    for i, (baseline, alloc) in enumerate((("static-max", ("contiguous", "max", 16)), ("tgi-max", ("contiguous", "max", 16)),
                                           ("orca-oracle", ORCA_ORACLE), ("paged", PAGED))):
        for model, gpu in (("llama-7b", "a10g"), ("llama-13b", "a100-40gb")):
            for n in (1, 3):
                add(_base(f"{exp}-{i}-{model}-{n}", exp, alloc, baseline=baseline, model=model, gpu_profile=gpu, n=n,
                          request_rate=float("inf"), output_token_throughput=round(400 * (i + 1) / n, 1)))

    exp = "paper-token-time"
    for i, (alloc, device, scale) in enumerate(((ORCA_MAX, "cpu", 1.0), (("paged", None, 1), "cpu", 1.0),
                                                (PAGED, "cpu", 1.0))):  # fmt: skip
        steps = _timed_steps(alloc[2], alloc[0] != "paged", scale)
        add(_base(f"{exp}-{i}", exp, alloc, backend="hf", device=device, gpu_profile=None,
                  model="tiny-llama"), (steps, _thin()[1]))
    return out


def write_fixture(out: str | Path = DEFAULT_OUT) -> Path:
    """(Re)write the fixture under ``out``: index.jsonl and runs/<experiment>/<run_id>/."""
    out = Path(out)
    shutil.rmtree(out / "runs", ignore_errors=True)
    (out / "index.jsonl").unlink(missing_ok=True)
    index = out / "index.jsonl"
    for summary, steps, requests, memmap in runs():
        run_dir = out / "runs" / summary["experiment"] / summary["run_id"]
        if memmap is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(run_dir / "memmap.npz", **memmap)
        write_run(run_dir, summary, steps, requests, index)
    (out / "index.jsonl.lock").unlink(missing_ok=True)
    # kernel latency as scripts/gpu_check.sh writes it; made-up numbers for the figure test only
    rows = ["block_size,context_len,batch,latency_us"]
    rows += [f"{b},{c},{n},{5 + c * n / 2000 * (1 + 4 / b):.2f}" for b in (8, 16, 32) for c in (256, 1024, 4096) for n in (1, 8)]
    (out / "kernel_latency.csv").write_text("\n".join(rows) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_figs.make_fixture", description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="folder (%(default)s)")
    args = parser.parse_args(argv)
    out = write_fixture(args.out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(runs())} runs to {out} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
