"""``kvbench-validate --fit-ops DIR``: a GPU profile fitted on a user's own operator tables.

DIR holds measured tables in the CSV format of Vidur's ``mlp.csv`` (``kvbench/sim/data/vidur``):
one row per (model, TP degree, token count) with the ``time_stats.<op>.median`` columns (ms) of
``operators.OP_NAMES`` and the shape columns. Every ``*.csv`` or ``*.csv.gz`` under DIR is read;
a file with a ``model`` column names its models, else the model is the file's folder (Vidur's
``<org>/<model>/mlp.csv``) or, for a file of another name, its stem.

The profile written holds the spec figures given, both operator models' constants (``roofline``
at the top level, ``fixed_floor`` in its own mapping), ``op_model`` (the one asked for) and, as
comments, the held-out error of each fit: leave one model out when the tables hold two models
or more, else leave one TP degree out, else none (said so).
"""
from __future__ import annotations

import csv
import gzip
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvbench.sim import opfit
from kvbench.sim.operators import OP_KEYS, OP_MODELS, OP_NAMES

REQUIRED_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                    "num_tensor_parallel_workers", *(f"time_stats.{op}.median" for op in OP_NAMES))
REPORTED_KINDS = ("gemm", "norm", "act", "rope", "add", "layer")


class TableError(ValueError):
    """A table under DIR that cannot be read as operator measurements (one line)."""


@dataclass(frozen=True)
class Spec:
    """The datasheet figures of the GPU the tables were measured on (profile keys)."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float
    host_bandwidth: float
    interconnect_bandwidth: float | None = None
    peak_flops_fp32: float | None = None


def table_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name.endswith((".csv", ".csv.gz")))


def _open(path: Path):
    return gzip.open(path, "rt", newline="") if path.name.endswith(".gz") else open(path, newline="")


def read_tables(directory: Path, gpu: str) -> list[opfit.OpGroup]:
    """The groups of every table under ``directory``; ``TableError`` naming the first bad one."""
    if not directory.is_dir():
        raise TableError(f"--fit-ops: {directory} is not a directory")
    files = table_files(directory)
    if not files:
        raise TableError(f"--fit-ops: no *.csv or *.csv.gz table under {directory}")
    rows: dict[tuple[str, int], list[dict]] = {}
    for path in files:
        stem = path.name.removesuffix(".gz").removesuffix(".csv")
        default_model = path.parent.name if stem == "mlp" else stem
        try:
            with _open(path) as f:
                reader = csv.DictReader(f)
                missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
                if missing:
                    raise TableError(f"--fit-ops: table {path} lacks column {missing[0]!r} "
                                     f"(the Vidur mlp.csv format, {len(missing)} missing)")
                for row in reader:
                    key = (row.get("model") or default_model, int(row["num_tensor_parallel_workers"]))
                    rows.setdefault(key, []).append(row)
        except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
            raise TableError(f"--fit-ops: cannot read table {path}: {exc}") from None
        except ValueError as exc:
            if isinstance(exc, TableError):
                raise
            raise TableError(f"--fit-ops: table {path}: num_tensor_parallel_workers is not an integer") from None
    try:
        groups = opfit.groups_of(gpu, rows)
    except (KeyError, ValueError, ZeroDivisionError) as exc:
        raise TableError(f"--fit-ops: a table under {directory} has a value that is not a number ({exc})") from None
    for g in groups:
        if len(g.tokens) < 3 or (g.tokens <= 0).any() or any((t <= 0).all() for t in g.measured_s.values()):
            raise TableError(f"--fit-ops: model {g.model} TP {g.tp}: needs 3 or more rows with num_tokens > 0 "
                             f"and a positive time of every operator")
    return groups


def held_out_label(groups: list[opfit.OpGroup]):
    """(name, key) of the held-out check the tables allow, or None."""
    if len({g.model for g in groups}) > 1:
        return "leave one model out", lambda g: g.model
    if len({g.tp for g in groups}) > 1:
        return "leave one TP degree out", lambda g: g.tp
    return None


def error_lines(errors: list[opfit.GroupError]) -> list[str]:
    """Median |error| per operator kind, all token counts and at 64 tokens or fewer."""
    out = []
    for regime in (None, "<=64"):
        cells = []
        for kind in REPORTED_KINDS:
            median, _ = opfit.summary(errors, kind, regime)
            cells.append(f"{kind} {median:.1%}")
        out.append(f"{'all token counts' if regime is None else '<= 64 tokens'}: " + ", ".join(cells))
    return out


def fit_profile(groups: list[opfit.OpGroup], spec: Spec, op_model: str, source: str) -> str:
    """The profile YAML text: spec, both models' constants, the held-out errors as comments."""
    peak, bw = spec.peak_flops, spec.mem_bandwidth
    fits = {model: opfit.fit(groups, peak, bw, model) for model in OP_MODELS}
    check = held_out_label(groups)
    lines = [f"# GPU profile fitted by kvbench-validate --fit-ops on the measured operator tables in {source}",
             f"# ({len({g.model for g in groups})} models, TP degrees {sorted({g.tp for g in groups})}, "
             f"{sum(len(g.tokens) for g in groups)} rows). Spec figures: as given on the command line.",
             "# Held-out |error| median (model vs measured operator time):"]
    for model in OP_MODELS:
        if check is None:
            lines.append(f"#   {model}: none (one model and one TP degree: nothing to hold out)")
            continue
        name, key = check
        held = opfit.held_out(groups, key, peak, bw, model)
        lines += [f"#   {model}, {name}, {text}" for text in error_lines(held)]
    lines += [f"name: {spec.name}", f"memory_bytes: {spec.memory_bytes:.12g}", f"peak_flops: {spec.peak_flops:.12g}",
              f"mem_bandwidth: {spec.mem_bandwidth:.12g}", f"host_bandwidth: {spec.host_bandwidth:.12g}"]
    if spec.interconnect_bandwidth is not None:
        lines.append(f"interconnect_bandwidth: {spec.interconnect_bandwidth:.12g}")
    if spec.peak_flops_fp32 is not None:
        lines.append(f"peak_flops_fp32: {spec.peak_flops_fp32:.12g}")
    lines += ["count: 1", f"op_model: {op_model}",
              f"op_constants_from: the measured operator tables in {source} (kvbench-validate --fit-ops)",
              "# roofline operator model (operators.py)"]
    lines += [f"{key}: {fits['roofline'][key]:.4g}" for key in OP_KEYS]
    lines.append("fixed_floor:  # the fixed_floor operator model's constants (op_model: fixed_floor)")
    lines += [f"  {key}: {value:.4g}" for key, value in fits["fixed_floor"].items()]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
