"""``kvbench-validate``: the cost model against published measurements (``measurements.csv``).

Each row is one static batch as the source ran it: ``batch`` sequences of ``input_len`` prompt
tokens, one prefill step that samples the first token, then ``output_len - 1`` decode steps
(contexts ``input_len + 1 ...``). The modelled latency is the sum of ``step_time`` over those
steps. The host side is the measured system's: FasterTransformer is a C++ runtime with no
Python scheduler between steps, so its per-step host overhead is 0 (the per-layer launch cost
of the GPU profile stays). Prints model vs measured and the error of every point, then the
median and worst absolute errors.

``--fit`` calibrates the four GPU-side constants that first principles leave open
(``FIT_KEYS``: per-layer launch cost, all-reduce latency, the asymptotic matmul efficiency
and its half-performance hidden size) by least squares on log(model / measured), and reports
the leave-one-model-out error: each model's points predicted by constants fitted on the other
models only. The values it prints are the ones in ``cost_model.DEFAULTS``.
"""
from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from scipy.optimize import least_squares

from kvbench.sim.cost_model import CostParams, StepSummary, step_time
from kvbench.sim.profiles import load_gpu

MEASUREMENTS = Path(__file__).with_name("measurements.csv")

# GPT geometries as the FasterTransformer guide lists them (head_num, size_per_head, num_layers,
# vocab 51200); FFN 4 x hidden, learned positions, biases, tied embeddings: the "opt" family.
GPT_MODELS: dict[str, tuple[int, int, int]] = {  # name: (heads, head_size, layers)
    "gpt-1.3b": (32, 64, 24),
    "gpt-6.7b": (32, 128, 32),
    "gpt-20b": (48, 128, 44),
    "gpt-89b": (96, 128, 48),
    "gpt-175b": (96, 128, 96),
}
SYSTEMS = {"fastertransformer": {"step_overhead_s": 0.0, "seq_overhead_s": 0.0, "sample_host_s": 0.0}}
BLOCK_SIZE = 16  # contiguous KV read in 16-token runs, as the contiguous strategies here


def gpt_model(name: str):
    heads, head_size, layers = GPT_MODELS[name]
    hidden = heads * head_size
    return OmegaConf.create({
        "name": name, "family": "opt", "num_layers": layers, "hidden_size": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_size": head_size,
        "intermediate_size": 4 * hidden, "vocab_size": 51200, "max_model_len": 2048, "dtype": "float16",
    })


def static_batch_ms(params: CostParams, batch: int, input_len: int, output_len: int) -> float:
    """Modelled latency of one static batch, ms."""
    blocks = -(-input_len // BLOCK_SIZE)
    prefill = StepSummary(BLOCK_SIZE, num_tokens=batch * input_len, num_seqs=batch, num_sampled=batch,
                          num_draws=batch, prefill_pairs=batch * input_len * (input_len + 1) / 2,
                          prefill_blocks=batch * blocks)
    total = step_time(params, prefill)["duration_s"]
    for t in range(1, output_len):
        ctx = input_len + t
        decode = StepSummary(BLOCK_SIZE, num_tokens=batch, num_seqs=batch, num_sampled=batch, num_draws=batch,
                             decode_pairs=batch * ctx, decode_blocks=batch * -(-ctx // BLOCK_SIZE))
        total += step_time(params, decode)["duration_s"]
    return total * 1e3


def load_points(path: Path = MEASUREMENTS) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def evaluate(points: list[dict], system: str = "fastertransformer", constants: dict | None = None) -> list[dict]:
    """Each point with ``model_ms`` and ``error`` (model / measured - 1); ``constants``
    override cost-model constants on every GPU profile (as a profile key would)."""
    out = []
    for p in points:
        gpu = load_gpu(p["gpu"], count=int(p["count"]))
        if constants:
            gpu = OmegaConf.merge(gpu, constants)
        params = CostParams.from_configs(gpt_model(p["model"]), gpu, OmegaConf.create(SYSTEMS[system]))
        model_ms = static_batch_ms(params, int(p["batch"]), int(p["input_len"]), int(p["output_len"]))
        measured = float(p["measured_ms"])
        out.append(p | {"model_ms": model_ms, "error": model_ms / measured - 1.0})
    return out


def median_abs_error(rows: list[dict]) -> float:
    return statistics.median(abs(r["error"]) for r in rows)


# name: (start, lower, upper, scale): scale keeps the optimiser's steps of order one
FIT_KEYS: dict[str, tuple[float, float, float, float]] = {
    "layer_overhead_s": (5e-5, 0.0, 1e-3, 1e-4),
    "allreduce_latency_s": (1e-5, 0.0, 1e-3, 1e-4),
    "eff_flops": (0.7, 0.1, 1.0, 1.0),
    "gemm_half_width": (1000.0, 0.0, 2e4, 1e3),
}


def fit(points: list[dict]) -> dict[str, float]:
    """``FIT_KEYS`` minimising the squared log error over ``points``."""
    start, lower, upper, scale = (np.array(col) for col in zip(*FIT_KEYS.values()))

    def residuals(x):
        constants = dict(zip(FIT_KEYS, (x * scale).tolist()))
        return [np.log1p(r["error"]) for r in evaluate(points, constants=constants)]

    result = least_squares(residuals, start / scale, bounds=(lower / scale, upper / scale), x_scale=1.0)
    return dict(zip(FIT_KEYS, (result.x * scale).tolist()))


def leave_one_model_out(points: list[dict]) -> list[dict]:
    """Every point predicted by constants fitted on the other models' points."""
    out = []
    for name in sorted({p["model"] for p in points}):
        constants = fit([p for p in points if p["model"] != name])
        out += evaluate([p for p in points if p["model"] == name], constants=constants)
    return out


def print_fit(points: list[dict]) -> None:
    constants = fit(points)
    print("constants fitted on every point (cost_model.DEFAULTS):")
    for key, value in constants.items():
        print(f"  {key:20} {value:.4g}")
    print(f"in-sample median |error| {median_abs_error(evaluate(points, constants=constants)):.1%}")
    held_out = leave_one_model_out(points)
    for name in sorted({r["model"] for r in held_out}):
        rows = [r for r in held_out if r["model"] == name]
        print(f"  {name:9} held out: median |error| {median_abs_error(rows):.1%}")
    print(f"leave-one-model-out median |error| {median_abs_error(held_out):.1%}")


def main(argv: list[str] | None = None) -> int:
    from kvbench.cli import OneLineParser, fail
    from kvbench.sim.points_file import PointsError, check_points, read_points

    parser = OneLineParser(prog="kvbench-validate", description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=MEASUREMENTS, help="measurements CSV")
    parser.add_argument("--fit", action="store_true", help="calibrate FIT_KEYS and cross-validate them")
    args = parser.parse_args(argv)
    try:
        points = check_points(read_points(args.file), args.file, GPT_MODELS, fit_keys=len(FIT_KEYS) if args.fit else 0)
    except PointsError as exc:
        return fail("kvbench-validate", str(exc))
    if args.fit:
        print_fit(points)
        return 0
    rows = evaluate(points)
    print(f"{'model':9} {'GPUs':>4} {'batch':>5} {'in':>4} {'out':>4} {'measured ms':>12} {'model ms':>10} {'error':>7}")
    for r in rows:
        print(f"{r['model']:9} {r['count']:>4} {r['batch']:>5} {r['input_len']:>4} {r['output_len']:>4} "
              f"{float(r['measured_ms']):12.1f} {r['model_ms']:10.1f} {r['error']:+7.1%}")
    worst = max(rows, key=lambda r: abs(r["error"]))
    print(f"\n{len(rows)} points; median |error| {median_abs_error(rows):.1%}; worst {worst['error']:+.1%} "
          f"({worst['model']}, batch {worst['batch']}, {worst['input_len']}+{worst['output_len']} tokens)")
    sources = sorted({r["source"] for r in rows})
    print("sources:\n  " + "\n  ".join(sources))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
