"""The operator model (``operators``) against measured operator times, and its calibration.

Data: ``kvbench/sim/data/vidur/compute_<gpu>.csv.gz``, Vidur's per-operator GPU times of one
decoder layer's non-attention work (median of repeats, ms) by tokens in the batch and tensor-
parallel degree, for Llama-2-7B/70B, CodeLlama-34B (A100, H100) and Llama-3-8B/70B (A100).
A group is one (GPU, model, TP degree): every measured token count of every operator.

``fit`` finds the operator constants of one GPU (``operators.OP_MODELS[op_model]``: the
``roofline`` model's, or ``fixed_floor``'s with the elementwise floors) by robust least
squares on log(model / measured); ``held_out`` predicts each model (or each TP degree) from
constants fitted on the other models (TP degrees) only. ``fit_allreduce`` fits the latency +
ring fallback of the all-reduce to a measured NCCL table.
"""
from __future__ import annotations

import csv
import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from scipy.optimize import least_squares

from kvbench.sim import allreduce
from kvbench.sim.operators import (DEFAULT_OP_MODEL, ELEMENTWISE_KIND, ELEMENTWISE_KINDS, FLOOR_KEYS, GEMM_OPS, OP_KEYS, OP_MODELS,
                                   OP_NAMES, LayerShape)

DATA_DIR = allreduce.DATA_DIR
# GPU profile -> (operator data file, NCCL table): Vidur's a100 and h100 devices
MEASURED_GPUS = {"a100-80gb": ("a100", "a100_dgx"), "h100-80gb": ("h100", "h100_dgx")}

# name: (start, lower, upper); the optimiser works on value / start
OP_START: dict[str, tuple[float, float, float]] = {
    "gemm_eff_max": (0.8, 0.05, 1.0),
    "gemm_m_half": (50.0, 0.0, 1e4),
    "gemm_n_half": (200.0, 0.0, 1e5),
    "gemm_k_half": (200.0, 0.0, 1e5),
    **{f"{kind}_eff_bw": (0.6, 0.01, 1.0) for kind in ("gemm", "norm", "act", "rope", "add")},
    **{f"{kind}_fixed_s": (3e-6, 0.0, 1e-3) for kind in ("gemm", "norm", "act", "rope", "add")},
}
OP_START |= {key: (100.0, 0.0, 1e4) for key in FLOOR_KEYS}
assert set(OP_START) == set(OP_KEYS + FLOOR_KEYS)
# batch regimes the errors are reported by: tokens in the step, (low, high] inclusive of high
REGIMES: dict[str, tuple[float, float]] = {"<=64": (0, 64), "65-512": (64, 512), ">512": (512, float("inf"))}
# The tables record each repeat in whole microseconds (ms to 3 decimals; their medians fall on
# 0.5 us steps), so a 2 us entry stands for anything from 1.5 to 2.5 us: at 1-3 us, the size of
# small-batch elementwise kernels, that rounding alone is a 17-50% error.
TIMER_HALF_STEP_S = 0.5e-6


@dataclass(frozen=True)
class OpGroup:
    """Every measured token count of one (GPU, model, TP degree)."""

    gpu: str
    model: str
    tp: int
    shape: LayerShape
    tokens: np.ndarray
    measured_s: dict[str, np.ndarray]  # op -> seconds, aligned with tokens


def load_groups(gpu: str) -> list[OpGroup]:
    """The operator measurements of a GPU profile in ``MEASURED_GPUS``."""
    data, _ = MEASURED_GPUS[gpu]
    rows: dict[tuple[str, int], list[dict]] = {}
    with gzip.open(DATA_DIR / f"compute_{data}.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault((row["model"], int(row["num_tensor_parallel_workers"])), []).append(row)
    return groups_of(gpu, rows)


def groups_of(gpu: str, rows: dict[tuple[str, int], list[dict]]) -> list[OpGroup]:
    """``OpGroup``s of rows in Vidur's CSV format keyed by (model, TP degree); KeyError or
    ValueError on a missing column or a value that is not a number."""
    groups = []
    for (model, tp), rs in sorted(rows.items()):
        r = rs[0]
        heads, hidden = int(r["n_head"]), int(r["n_embd"])
        geometry = SimpleNamespace(hidden_size=hidden, head_size=hidden // heads, num_heads=heads,
                                   num_kv_heads=int(r["n_kv_head"]), intermediate_size=int(r["n_expanded_embd"]),
                                   family="llama" if r["use_gated_mlp"] == "True" else "opt")
        measured = {op: np.array([float(x[f"time_stats.{op}.median"]) * 1e-3 for x in rs]) for op in OP_NAMES}
        groups.append(OpGroup(gpu, model, tp, LayerShape.of_model(geometry, tp, 2),
                              np.array([float(x["num_tokens"]) for x in rs]), measured))
    return groups


def rates(gpu_cfg) -> tuple[float, float]:
    return float(gpu_cfg.peak_flops), float(gpu_cfg.mem_bandwidth)


def predict(group: OpGroup, constants: dict[str, float], peak: float, bw: float) -> dict[str, np.ndarray]:
    return group.shape.op_times(constants, peak, bw, group.tokens)


def log_errors(groups: list[OpGroup], constants: dict[str, float], peak: float, bw: float,
               ops: tuple[str, ...] = OP_NAMES) -> np.ndarray:
    out = []
    for g in groups:
        pred = predict(g, constants, peak, bw)
        for op in ops:
            ok = g.measured_s[op] > 0
            out.append(np.log(pred[op][ok] / g.measured_s[op][ok]))
    return np.concatenate(out)


def fit(groups: list[OpGroup], peak: float, bw: float, op_model: str = DEFAULT_OP_MODEL) -> dict[str, float]:
    """The constants of ``op_model`` (``OP_MODELS``) minimising a robust (soft L1, 10% scale)
    loss on log error over ``groups``."""
    if op_model == "roofline":  # one joint fit, as the shipped roofline constants were fitted
        return _fit_keys(groups, peak, bw, OP_KEYS, OP_NAMES, {})[0]
    # fixed_floor: each kind's residuals depend on its own constants only, so each kind is
    # fitted alone; the kink of max(tokens, min_tokens) gets two starts, the better kept; each
    # batch regime (REGIMES) weighs the same, or the many large-batch points would decide the
    # decode-sized steps most simulated steps are
    gemm_keys = tuple(k for k in OP_KEYS if k.startswith("gemm_"))
    base = {k: OP_START[k][0] for k in OP_MODELS[op_model]}
    out = _fit_keys(groups, peak, bw, gemm_keys, GEMM_OPS, base)[0]
    base |= out
    for kind in ELEMENTWISE_KINDS:
        keys = (f"{kind}_eff_bw", f"{kind}_fixed_s", f"{kind}_min_tokens")
        ops = tuple(op for op in OP_NAMES if ELEMENTWISE_KIND.get(op) == kind)
        best = min((_fit_keys(groups, peak, bw, keys, ops, base, {keys[2]: start}, balanced=True)
                    for start in MIN_TOKENS_STARTS),
                   key=lambda fitted: fitted[1])
        out |= best[0]
    return {k: out[k] for k in OP_MODELS[op_model]}


MIN_TOKENS_STARTS = (16.0, 256.0)


def regime_weights(groups: list[OpGroup], ops: tuple[str, ...]) -> np.ndarray:
    """Per residual of ``log_errors(..., ops)``: sqrt(points / (regimes * points of its regime))."""
    tokens = np.concatenate([g.tokens[g.measured_s[op] > 0] for g in groups for op in ops])
    weights = np.ones_like(tokens)
    for low, high in REGIMES.values():
        mask = (tokens > low) & (tokens <= high)
        if mask.any():
            weights[mask] = np.sqrt(len(tokens) / (len(REGIMES) * mask.sum()))
    return weights


def _fit_keys(groups: list[OpGroup], peak: float, bw: float, keys: tuple[str, ...], ops: tuple[str, ...],
              fixed: dict[str, float], starts: dict[str, float] | None = None,
              balanced: bool = False) -> tuple[dict[str, float], float]:
    """(``keys`` minimising a robust (soft L1, 10% scale) loss on the log error of ``ops``, the
    loss), the other constants held at ``fixed``; ``balanced``: ``regime_weights``."""
    start, lower, upper = (np.array(col) for col in zip(*(OP_START[k] for k in keys)))
    scale = start
    x0 = np.array([(starts or {}).get(k, s) for k, s in zip(keys, start)]) / scale
    weights = regime_weights(groups, ops) if balanced else 1.0

    def residuals(x):
        return weights * log_errors(groups, fixed | dict(zip(keys, x * scale)), peak, bw, ops)

    result = least_squares(residuals, x0, bounds=(lower / scale, upper / scale), loss="soft_l1", f_scale=0.1)
    return dict(zip(keys, (result.x * scale).tolist())), float(result.cost)


@dataclass(frozen=True)
class GroupError:
    """Absolute relative errors of one group: per operator kind and of the whole layer."""

    gpu: str
    model: str
    tp: int
    by_kind: dict[str, np.ndarray]  # "gemm" | "norm" | "act" | "rope" | "add" | "all" -> |error|
    layer: np.ndarray  # |error| of the sum of the layer's operators, per token count
    tokens_by_kind: dict[str, np.ndarray]  # the token count of each entry of by_kind
    tokens: np.ndarray  # the token count of each entry of layer
    # |error| beyond the tables' rounding: max(0, |model - measured| - TIMER_HALF_STEP_S) / measured
    beyond_rounding: dict[str, np.ndarray] = field(default_factory=dict)


def op_kind(op: str) -> str:
    return "gemm" if op in GEMM_OPS else ELEMENTWISE_KIND[op]


def group_errors(groups: list[OpGroup], constants: dict[str, float], peak: float, bw: float) -> list[GroupError]:
    out = []
    for g in groups:
        pred = predict(g, constants, peak, bw)
        kinds: dict[str, list[np.ndarray]] = {}
        tokens: dict[str, list[np.ndarray]] = {}
        rounded: dict[str, list[np.ndarray]] = {}
        for op in OP_NAMES:
            ok = g.measured_s[op] > 0
            measured = g.measured_s[op][ok]
            err = np.abs(pred[op][ok] / measured - 1.0)
            beyond = np.maximum(np.abs(pred[op][ok] - measured) - TIMER_HALF_STEP_S, 0.0) / measured
            for kind in (op_kind(op), "all"):
                kinds.setdefault(kind, []).append(err)
                tokens.setdefault(kind, []).append(g.tokens[ok])
                rounded.setdefault(kind, []).append(beyond)
        layer = np.abs(sum(pred.values()) / sum(g.measured_s.values()) - 1.0)
        out.append(GroupError(g.gpu, g.model, g.tp, {k: np.concatenate(v) for k, v in kinds.items()}, layer,
                              {k: np.concatenate(v) for k, v in tokens.items()}, g.tokens,
                              {k: np.concatenate(v) for k, v in rounded.items()}))
    return out


def held_out(groups: list[OpGroup], key: Callable[[OpGroup], object], peak: float, bw: float,
             op_model: str = DEFAULT_OP_MODEL) -> list[GroupError]:
    """Each value of ``key`` (a model, a TP degree) predicted by constants fitted on the others."""
    out = []
    for value in sorted({key(g) for g in groups}):
        constants = fit([g for g in groups if key(g) != value], peak, bw, op_model)
        out += group_errors([g for g in groups if key(g) == value], constants, peak, bw)
    return out


def summary(errors: list[GroupError], kind: str = "all", regime: str | None = None,
            beyond_rounding: bool = False) -> tuple[float, float]:
    """Median and 90th percentile of absolute error over the groups' points of a kind
    (``layer`` for the whole layer), of one batch regime (``REGIMES``) or all; NaN if none.
    ``beyond_rounding``: the error left after the tables' 1 us rounding (operators only)."""
    values = []
    for e in errors:
        per_kind = e.beyond_rounding if beyond_rounding else e.by_kind
        err, tokens = (e.layer, e.tokens) if kind == "layer" else (
            per_kind.get(kind, np.empty(0)), e.tokens_by_kind.get(kind, np.empty(0)))
        if regime is not None:
            low, high = REGIMES[regime]
            err = err[(tokens > low) & (tokens <= high)]
        values.append(err)
    values = np.concatenate(values)
    if not values.size:
        return float("nan"), float("nan")
    return float(np.median(values)), float(np.quantile(values, 0.9))


# -- all-reduce ---------------------------------------------------------------------------
def allreduce_points(table: str) -> list[tuple[int, float, float]]:
    """(workers, bytes, seconds) of a monotone NCCL table, single node."""
    return [(w, s, t) for w, (sizes, times) in sorted(allreduce.load(table).items()) for s, t in zip(sizes, times)]


def allreduce_formula_s(latency_s: float, rate: float, workers, nbytes):
    return latency_s + 2.0 * (workers - 1) / workers * nbytes / rate


def fit_allreduce(table: str, link_bandwidth: float) -> dict[str, float]:
    """``allreduce_latency_s`` and ``eff_interconnect`` of the fallback formula, least squares
    on log error over a table's points."""
    w, b, t = (np.array(col) for col in zip(*allreduce_points(table)))

    def residuals(x):
        return np.log(allreduce_formula_s(x[0] * 1e-5, x[1] * link_bandwidth, w, b) / t)

    result = least_squares(residuals, [2.0, 0.7], bounds=([0.0, 0.01], [100.0, 1.0]))
    return {"allreduce_latency_s": float(result.x[0] * 1e-5), "eff_interconnect": float(result.x[1])}


def allreduce_errors(table: str, latency_s: float, rate: float) -> dict[str, tuple[float, float]]:
    """Median and p90 |error| against the measured (raw) times of (a) the odd-indexed sizes
    interpolated from a monotone table of the even-indexed ones, (b) the fallback formula."""
    split, formula = [], []
    for workers, (sizes, times) in allreduce.load_raw(table).items():
        train = allreduce.monotone(sizes[::2], times[::2])
        split += [abs(allreduce.interpolate(*train, s) / t - 1.0) for s, t in zip(sizes[1::2], times[1::2])]
        formula += list(np.abs(allreduce_formula_s(latency_s, rate, workers, np.array(sizes)) / np.array(times) - 1.0))
    return {name: (float(np.median(v)), float(np.quantile(v, 0.9))) for name, v in
            (("table, odd sizes from even ones", split), ("latency + ring formula", formula))}
