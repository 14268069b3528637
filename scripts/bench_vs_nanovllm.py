"""kvbench's simulator against nano-vllm's scheduler and block manager, per sequence-step.

The same requests on both sides: ``--requests`` (1,000) ShareGPT requests at t=0 (OPT-13B's
workload and context limit), a pool of 920 blocks of 16 token slots, at most 256 sequences and
2,048 batched tokens a step. kvbench runs its engine on the sim backend (``paged`` and
``paged_prefix``); nano-vllm runs its own ``Scheduler`` and ``BlockManager`` driven by a fake
model runner that returns one token per scheduled sequence (no model, no GPU).

nano-vllm is not installed nor copied: ``--nanovllm PATH`` names a directory holding its
``nanovllm/engine/{scheduler,block_manager,sequence}.py`` and ``nanovllm/sampling_params.py``
(the repository's root, MIT license); only those four files are loaded, with a small stand-in
for its ``config`` module (which would load a Hugging Face model config). Without the path the
script prints one line and exits 0.

Timing: CPU time of this process (``time.process_time``) around the step loop of each side only
(kvbench: ``Engine.run``; nano-vllm: adding the sequences, then schedule/postprocess until done),
one run of each side per round, in rotating order. Both sides run with Python's cycle collector
off (kvbench's ``Engine.run`` turns it off; the script does the same around nano-vllm's loop).
A sequence-step is one sequence in one step's batch. The ratios (kvbench / nano-vllm) are taken within each round; the medians of rounds are
printed, which drift of a shared machine moves little. A cProfile run of each side then splits
the time by component.

    PYTHONPATH=. python scripts/bench_vs_nanovllm.py --nanovllm ../shared/peers/nano-vllm \
        [--requests 1000] [--rounds 5] [--allocators paged,paged_prefix] [--no-profile]
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import importlib.util
import pstats
import statistics
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NUM_BLOCKS = 920
BLOCK_SIZE = 16
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 2048
BYTES_PER_SLOT_OPT13B = 819_200  # 40 layers x 5,120 x 2 (K and V) x 2 bytes
NANO_FILES = ("sampling_params.py", "engine/sequence.py", "engine/block_manager.py", "engine/scheduler.py")


# ---------------------------------------------------------------- nano-vllm, loaded from its files

@dataclasses.dataclass
class StubConfig:
    """The fields of nano-vllm's ``Config`` that its scheduler reads (no model directory)."""

    max_num_seqs: int = MAX_NUM_SEQS
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    eos: int = -1
    kvcache_block_size: int = BLOCK_SIZE
    num_kvcache_blocks: int = NUM_BLOCKS


def nano_files_missing(root: Path) -> list[str]:
    return [f for f in NANO_FILES if not (root / "nanovllm" / f).is_file()]


def load_nanovllm(root: Path) -> types.SimpleNamespace:
    """nano-vllm's four modules under their own names, with ``nanovllm.config`` stubbed."""
    for pkg in ("nanovllm", "nanovllm.engine"):
        module = types.ModuleType(pkg)
        module.__path__ = []  # a package, so that the files' absolute imports resolve from sys.modules
        sys.modules[pkg] = module
    config = types.ModuleType("nanovllm.config")
    config.Config = StubConfig
    sys.modules["nanovllm.config"] = config
    loaded = {}
    for rel in NANO_FILES:
        name = "nanovllm." + rel[:-3].replace("/", ".")
        spec = importlib.util.spec_from_file_location(name, root / "nanovllm" / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded[name.rsplit(".", 1)[1]] = module
    loaded["sequence"].Sequence.block_size = BLOCK_SIZE  # what its LLMEngine sets from the config
    return types.SimpleNamespace(**loaded)


def run_nanovllm(nano: types.SimpleNamespace, requests: list) -> dict[str, float]:
    """nano-vllm's scheduling loop to completion with a fake runner (one token per sequence)."""
    params = [nano.sampling_params.SamplingParams(max_tokens=r.output_len, ignore_eos=True) for r in requests]
    collecting = gc.isenabled()
    gc.disable()  # as kvbench's Engine.run does: like for like
    try:
        return _nanovllm_loop(nano, requests, params)
    finally:
        if collecting:
            gc.enable()


def _nanovllm_loop(nano: types.SimpleNamespace, requests: list, params: list) -> dict[str, float]:
    c0 = time.process_time()
    scheduler = nano.scheduler.Scheduler(StubConfig())
    for r, p in zip(requests, params):
        scheduler.add(nano.sequence.Sequence(r.prompt_ids, p))
    steps = seq_steps = 0
    while not scheduler.is_finished():
        seqs, is_prefill = scheduler.schedule()
        scheduler.postprocess(seqs, [1] * len(seqs), is_prefill)
        steps += 1
        seq_steps += len(seqs)
    return {"cpu_s": time.process_time() - c0, "steps": steps, "seq_steps": seq_steps}


# ---------------------------------------------------------------- kvbench, sim backend

def kvbench_cfg(allocator: str, num_requests: int):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[
            f"allocator={allocator}", "model=opt-13b", "gpu=a100-40gb", "backend=sim", "workload=sharegpt",
            f"workload.num_requests={num_requests}", "progress=false", "logger=none",
            f"engine.kv_cache_bytes={NUM_BLOCKS * BLOCK_SIZE * BYTES_PER_SLOT_OPT13B}",
            f"allocator.block_size={BLOCK_SIZE}", f"engine.max_num_seqs={MAX_NUM_SEQS}",
            f"engine.max_num_batched_tokens={MAX_NUM_BATCHED_TOKENS}"])


def kvbench_engine(cfg):
    """A fresh allocator, executor and engine, and the requests (not timed)."""
    from kvbench.run.prepare import prepare
    from kvbench.engine import Engine, SchedulerConfig

    prep = prepare(cfg)
    engine = Engine(prep.allocator, prep.executor, SchedulerConfig(
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS, max_num_seqs=MAX_NUM_SEQS,
        max_model_len=int(cfg.model.max_model_len)))
    return engine, prep.workload.requests


def run_kvbench(cfg) -> dict[str, float]:
    """``Engine.run`` on a fresh engine, timed alone."""
    engine, requests = kvbench_engine(cfg)
    c0 = time.process_time()
    out = engine.run(requests)
    cpu_s = time.process_time() - c0
    return {"cpu_s": cpu_s, "steps": len(out.steps), "seq_steps": int(out.steps["num_seqs"].sum())}


# ---------------------------------------------------------------- profile by component

COMPONENTS = (  # (component, path fragments), first match wins
    ("kvbench recorder", ("kvbench/engine/recorder.py",)),
    ("kvbench engine", ("kvbench/engine/", "kvbench/batch.py", "kvbench/requests.py")),
    ("kvbench allocator", ("allocators/",)),
    ("kvbench cost model", ("kvbench/sim/", "kvbench/executors/")),
    ("nano-vllm scheduler", ("nanovllm/engine/scheduler.py",)),
    ("nano-vllm block manager", ("nanovllm/engine/block_manager.py",)),
    ("nano-vllm sequence", ("nanovllm/engine/sequence.py", "nanovllm/sampling_params.py")),
    ("this script", ("bench_vs_nanovllm.py",)),
    ("numpy", ("numpy/",)),
    ("pandas", ("pandas/",)),
)


def component(filename: str) -> str:
    name = filename.replace("\\", "/")
    for label, fragments in COMPONENTS:
        if any(f in name for f in fragments):
            return label
    if name == "~":
        return "builtins (C)"
    return "other Python"


def profile_split(fn) -> list[tuple[str, float]]:
    """Own time (tottime) of everything ``fn`` calls, summed by component, as shares; the time of a
    built-in (C) function is charged to the components of its callers, pro rata to their calls' time."""
    prof = cProfile.Profile(time.process_time)
    prof.runcall(fn)
    totals: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, _, tottime, _, callers) in pstats.Stats(prof).stats.items():
        if filename != "~" or not callers:
            totals[component(filename)] += tottime
            continue
        weights = {caller: entry[2] for caller, entry in callers.items()}  # the caller's tottime in this callee
        whole = sum(weights.values())
        for caller, w in weights.items():
            share = w / whole if whole else 1 / len(weights)
            totals[component(caller[0])] += tottime * share
    whole = sum(totals.values()) or 1.0
    return sorted(((k, v / whole) for k, v in totals.items()), key=lambda kv: -kv[1])


# ---------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanovllm", type=Path, default=REPO.parent / "shared" / "peers" / "nano-vllm",
                        help="directory holding nano-vllm's nanovllm/ package files")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--allocators", default="paged,paged_prefix")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    missing = nano_files_missing(args.nanovllm)
    if missing:
        print(f"skipped: no nano-vllm files under {args.nanovllm} (missing nanovllm/{missing[0]}); "
              "pass --nanovllm PATH", flush=True)
        return
    if args.requests < 1 or args.rounds < 1:
        print("--requests and --rounds must be at least 1", file=sys.stderr)
        raise SystemExit(2)
    try:
        import xxhash  # noqa: F401  nano-vllm's block manager hashes with it
    except ImportError:
        print("skipped: nano-vllm's block manager needs the xxhash package, not installed here", flush=True)
        return
    nano = load_nanovllm(args.nanovllm)
    allocators = args.allocators.split(",")
    cfgs = {name: kvbench_cfg(name, args.requests) for name in allocators}
    from kvbench.run.prepare import prepare

    requests = prepare(cfgs[allocators[0]]).workload.requests  # the same list every side runs
    sides = ["nano-vllm", *allocators]
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for r in range(args.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]  # rotate: no side always runs first
        for side in order:
            runs[side].append(run_nanovllm(nano, requests) if side == "nano-vllm" else run_kvbench(cfgs[side]))

    def us_per_seq_step(m: dict) -> float:
        return 1e6 * m["cpu_s"] / max(m["seq_steps"], 1)

    print(f"{args.requests} ShareGPT requests at t=0, {NUM_BLOCKS} blocks of {BLOCK_SIZE}, {MAX_NUM_SEQS} seqs, "
          f"{MAX_NUM_BATCHED_TOKENS} batched tokens; {args.rounds} rounds, CPU time, medians")
    print(f"{'side':<14} {'steps':>7} {'seq-steps':>10} {'us/seq-step':>12} {'x nano-vllm':>12}")
    for side in sides:
        ms = runs[side]
        us = statistics.median(us_per_seq_step(m) for m in ms)
        ratio = statistics.median(us_per_seq_step(m) / us_per_seq_step(n) for m, n in zip(ms, runs["nano-vllm"]))
        print(f"{side:<14} {ms[0]['steps']:>7} {ms[0]['seq_steps']:>10} {us:>12.2f} {ratio:>11.2f}x", flush=True)
    if args.no_profile:
        return
    print("\nprofile (cProfile, one run each; own time by component, share of the side's total):")
    for side in sides:
        if side == "nano-vllm":
            split = profile_split(lambda: run_nanovllm(nano, requests))
        else:
            engine, reqs = kvbench_engine(cfgs[side])
            split = profile_split(lambda: engine.run(reqs))
        print(f"  {side:<14} " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in split if v >= 0.01), flush=True)


if __name__ == "__main__":
    main()
