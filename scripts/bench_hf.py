"""Throughput of the kvbench engine (backend=hf) against transformers' own generation, one process.

The same workload (ShareGPT-like lengths scaled down, seeded random prompt ids) on the same
model object (dummy weights, float32, CPU by default) through:

1. this engine: paged allocator, block 16, every request at t=0, greedy;
2. transformers continuous batching: a ``ContinuousBatchingManager`` with one ``add_request`` per
   request, each with its own ``max_new_tokens`` (``generate_batch`` takes one max_new_tokens for
   all requests, so it would generate tokens we do not need);
3. plain ``generate`` on left-padded batches of ``--generate-batch`` requests: each batch runs to
   its longest output; only each request's own output_len tokens are counted.

Tokens/s counts the requests' output tokens over the wall time of the whole run (prefill
included). It prints the ratios, whether the greedy outputs match the engine's token for token,
and where the engine's time goes (attention / rest of forward / sampling / scheduling and the
rest, from the per-step timings).

    .venv/bin/python scripts/bench_hf.py                 # 32 requests, smollm2-135m, 2 threads
    .venv/bin/python scripts/bench_hf.py --quick         # 8 short requests: a smoke run
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Idle OpenMP workers sleep instead of spinning. On a CPU shared with other processes, spinning
# workers in the main thread stall every parallel op for a scheduler tick (measured here: one
# 8-token forward of this model took 2-3 s with 2 spinning threads, 76 ms with passive waiting).
# It must be set before torch loads OpenMP; it applies to all three paths alike.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def make_requests(num: int, seed: int, vocab_size: int, prompt_range=(16, 256), output_range=(16, 128),
                  output_scale: float = 1 / 3):
    """ShareGPT (prompt, output) length pairs from the shipped table, outputs scaled by output_scale,
    both clipped to their ranges; random prompt ids."""
    import numpy as np
    import pandas as pd

    from kvbench.requests import Request

    table = pd.read_csv(ROOT / "kvbench/workloads/data/sharegpt_lengths_smollm2.csv", comment="#")
    rng = np.random.default_rng(seed)
    rows = table.iloc[rng.choice(len(table), size=num, replace=False)]
    prompts = np.clip(rows["prompt_len"].to_numpy(), *prompt_range)
    outputs = np.clip((rows["output_len"].to_numpy() * output_scale).astype(int), *output_range)
    return [Request(i, rng.integers(0, vocab_size, size=int(p)).tolist(), int(o), 0.0)
            for i, (p, o) in enumerate(zip(prompts, outputs))]


def run_engine(model, model_cfg, requests, *, block_size: int, max_num_batched_tokens: int, attention: str):
    from omegaconf import OmegaConf

    from allocators import build
    from kvbench.engine import Engine, SchedulerConfig
    from kvbench.config.spec import model_geometry
    from kvbench.executors.hf import HFExecutor

    geometry = model_geometry(model_cfg)
    need = sum(r.prompt_len + r.output_len for r in requests)
    num_slots = -(-need // block_size) * block_size + 4 * block_size * len(requests)  # no preemption
    engine_cfg = OmegaConf.create({"attention": attention, "threads": None})
    executor = HFExecutor(model_cfg, engine_cfg, num_slots=num_slots, block_size=block_size, geometry=geometry,
                          device="cpu", seed=0, model=model)
    sched = SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=256,
                            max_model_len=int(model_cfg.max_model_len))
    engine = Engine(build("paged", num_slots, block_size=block_size), executor, sched)
    t0 = time.perf_counter()
    out = engine.run(requests)
    wall = time.perf_counter() - t0
    outputs = {rid: samples[0] for rid, samples in out.outputs.items()}
    return wall, outputs, out.steps, num_slots * geometry.bytes_per_slot


def run_hf_continuous_batching(model, requests, *, max_batch_tokens: int, block_size: int):
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    model.set_attn_implementation("sdpa")
    longest = max(r.prompt_len + r.output_len for r in requests)
    num_blocks = len(requests) * (-(-longest // block_size) + 1)
    gen = GenerationConfig(max_new_tokens=max(r.output_len for r in requests), do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=block_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                  max_requests_per_batch=256, use_cuda_graph=False, allow_block_sharing=False,
                                  use_async_batching=False)
    results = {}
    t0 = time.perf_counter()
    with torch.inference_mode(), model.continuous_batching_context_manager(
            generation_config=gen, continuous_batching_config=cb, block=True, warmup=False) as manager:
        ids = {manager.add_request(r.prompt_ids, request_id=f"r{r.request_id}", max_new_tokens=r.output_len,
                                   eos_token_id=-1): r for r in requests}
        while len(results) < len(ids):
            result = manager.get_result(timeout=5)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' continuous batching thread stopped")
                continue
            if result.is_finished():
                results[result.request_id] = list(result.generated_tokens)
    wall = time.perf_counter() - t0
    return wall, {ids[k].request_id: v for k, v in results.items()}


def run_hf_generate(model, requests, *, batch_size: int):
    import torch

    model.set_attn_implementation("sdpa")
    outputs = {}
    t0 = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(requests), batch_size):
            batch = requests[start:start + batch_size]
            width = max(r.prompt_len for r in batch)
            ids = torch.zeros((len(batch), width), dtype=torch.int64)
            mask = torch.zeros((len(batch), width), dtype=torch.int64)
            for i, r in enumerate(batch):
                ids[i, width - r.prompt_len:] = torch.tensor(r.prompt_ids)
                mask[i, width - r.prompt_len:] = 1
            new = max(r.output_len for r in batch)
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            for i, r in enumerate(batch):
                outputs[r.request_id] = gen[i, width:width + r.output_len].tolist()
    return time.perf_counter() - t0, outputs


def compare(reference: dict, outputs: dict) -> tuple[int, int]:
    """(requests with identical tokens, requests)."""
    return sum(outputs.get(rid) == toks for rid, toks in reference.items()), len(reference)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="conf/model/<name>.yaml (load=dummy is forced)")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--attention", default="torch", choices=("torch", "triton"))
    parser.add_argument("--generate-batch", type=int, default=8, help="batch size of plain generate")
    parser.add_argument("--skip", default="", help="comma list of baselines to skip: cb, generate")
    parser.add_argument("--quick", action="store_true", help="8 short requests (smoke run)")
    parser.add_argument("--json", help="also write the measurements to this JSON file")
    args = parser.parse_args(argv)

    import torch
    from omegaconf import OmegaConf

    from kvbench.hf.model import build_model

    torch.set_num_threads(args.threads)
    model_cfg = OmegaConf.load(ROOT / "conf/model" / f"{args.model}.yaml")
    model_cfg.load = "dummy"
    if args.quick:
        args.num_requests = 8
        requests = make_requests(8, args.seed, int(model_cfg.vocab_size), (16, 64), (8, 24))
    else:
        requests = make_requests(args.num_requests, args.seed, int(model_cfg.vocab_size))
    out_tokens = sum(r.output_len for r in requests)
    in_tokens = sum(r.prompt_len for r in requests)
    print(f"model {model_cfg.name} (dummy weights, {model_cfg.dtype}), {args.threads} threads, "
          f"torch {torch.__version__}")
    print(f"workload: {len(requests)} requests at t=0, prompts {min(r.prompt_len for r in requests)}-"
          f"{max(r.prompt_len for r in requests)} (sum {in_tokens}), outputs {min(r.output_len for r in requests)}-"
          f"{max(r.output_len for r in requests)} (sum {out_tokens}) tokens, seed {args.seed}")
    t0 = time.perf_counter()
    model = build_model(model_cfg, device="cpu", seed=0)
    print(f"model built in {time.perf_counter() - t0:.1f} s")

    # warm-up: one short run through each path (allocations, lazy imports)
    warm = make_requests(2, args.seed + 1, int(model_cfg.vocab_size), (16, 32), (4, 8))
    run_engine(model, model_cfg, warm, block_size=args.block_size,
               max_num_batched_tokens=args.max_num_batched_tokens, attention=args.attention)

    results = {}
    wall, engine_out, steps, kv_bytes = run_engine(model, model_cfg, requests, block_size=args.block_size,
                                                   max_num_batched_tokens=args.max_num_batched_tokens,
                                                   attention=args.attention)
    results["kvbench engine (paged, hf executor)"] = (wall, None)
    print(f"kvbench engine: {wall:.2f} s, {out_tokens / wall:.1f} output tok/s, {len(steps)} steps, "
          f"KV pool {kv_bytes / 2**20:.0f} MiB")
    skip = set(filter(None, args.skip.split(",")))
    if "cb" not in skip:
        run_hf_continuous_batching(model, warm, max_batch_tokens=args.max_num_batched_tokens,
                                   block_size=args.block_size)
        wall, cb_out = run_hf_continuous_batching(model, requests, max_batch_tokens=args.max_num_batched_tokens,
                                                  block_size=args.block_size)
        results["transformers continuous batching"] = (wall, compare(engine_out, cb_out))
        print(f"transformers CB: {wall:.2f} s, {out_tokens / wall:.1f} output tok/s")
    if "generate" not in skip:
        wall, gen_out = run_hf_generate(model, requests, batch_size=args.generate_batch)
        name = f"transformers generate (left-padded batches of {args.generate_batch})"
        results[name] = (wall, compare(engine_out, gen_out))
        print(f"transformers generate: {wall:.2f} s, {out_tokens / wall:.1f} output tok/s")

    engine_wall = results["kvbench engine (paged, hf executor)"][0]
    print()
    print(f"{'path':58s} {'wall s':>8s} {'out tok/s':>10s} {'engine x':>9s}  outputs == engine")
    for name, (wall, match) in results.items():
        same = "-" if match is None else f"{match[0]}/{match[1]}"
        print(f"{name:58s} {wall:8.2f} {out_tokens / wall:10.1f} {wall / engine_wall:9.2f}  {same}")

    total = steps["step_s"].sum() + steps["schedule_s"].sum()
    parts = {
        "attention (store + paged attention)": steps["attention_s"].sum(),
        "rest of forward (matmuls, norms, LM head)": steps["forward_s"].sum(),
        "sampling": steps["sampling_s"].sum(),
        "copy + swap": steps["copy_s"].sum() + steps["swap_s"].sum(),
        "scheduling (engine, allocator, recorder)": steps["schedule_s"].sum(),
    }
    parts["executor input building and other"] = total - sum(parts.values())
    print(f"\nwhere the engine's time goes ({total:.2f} s in steps, wall {engine_wall:.2f} s):")
    for name, seconds in parts.items():
        print(f"  {name:45s} {seconds:7.2f} s  {seconds / total:6.1%}")
    decode = steps[steps["num_prefill_tokens"] == 0]
    if len(decode):
        print(f"  decode-only steps: {len(decode)}, mean {decode['step_s'].mean() * 1e3:.1f} ms, attention "
              f"{decode['attention_s'].sum() / decode['step_s'].sum():.1%} of their time")
    if args.json:
        import json

        record = {
            "args": vars(args), "torch": torch.__version__, "output_tokens": out_tokens, "prompt_tokens": in_tokens,
            "paths": {name: {"wall_s": wall, "output_tok_s": out_tokens / wall, "engine_speedup": wall / engine_wall,
                             "outputs_match": None if match is None else list(match)}
                      for name, (wall, match) in results.items()},
            "engine_time_split_s": parts,
        }
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
