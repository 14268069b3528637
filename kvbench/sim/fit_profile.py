"""``kvbench-validate --fit-ops DIR``: a GPU profile fitted on a user's own operator tables.

DIR holds measured tables in the CSV format of Vidur's ``mlp.csv`` (``kvbench/sim/data/vidur``):
one row per (model, TP degree, token count) with the ``time_stats.<op>.median`` columns (ms) of
``operators.OP_NAMES`` and the shape columns. Every ``*.csv`` or ``*.csv.gz`` under DIR is read
once (links to folders followed); a file with a ``model`` column names its models, else the model
is the file's folder (Vidur's ``<org>/<model>/mlp.csv``) or, for a file of another name, its stem.
The tables are data from strangers: every field of every row is checked (``parse_row``), and a
table with a bad row, or one that disagrees with a table read before, is left out with one line
naming its file, row and field (``read_tables``; ``strict`` refuses instead).

The profile written holds the spec figures given, both operator models' constants (``roofline``
at the top level, ``fixed_floor`` in its own mapping), ``op_model`` (the one asked for) and, as
comments, the held-out error of each fit: leave one model out when the tables hold two models
or more, else leave one TP degree out, else none (said so).
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kvbench.results.outputs import OutputError, check_target
from kvbench.sim import opfit
from kvbench.sim.operators import OP_KEYS, OP_MODELS, OP_NAMES

TIME_FIELDS = tuple(f"time_stats.{op}.median" for op in OP_NAMES)
# integer columns: (lowest, highest) allowed; the highest are beyond any model or GPU (unit: count)
INT_FIELDS: dict[str, tuple[int, int]] = {
    "n_head": (1, 65536), "n_kv_head": (1, 65536), "n_embd": (1, 2**24), "n_expanded_embd": (1, 2**26),
    "num_tokens": (1, 10**7), "num_tensor_parallel_workers": (1, 4096),
}
SHAPE_FIELDS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")  # one model, one shape
REQUIRED_COLUMNS = (*SHAPE_FIELDS, "num_tokens", "num_tensor_parallel_workers", *TIME_FIELDS)
MAX_TIME_MS = 1e7  # one operator of one layer for nearly three hours: not a measurement
MIN_TOKEN_COUNTS = 3  # distinct token counts a (model, TP degree) needs to be fitted
REPORTED_KINDS = ("gemm", "norm", "act", "rope", "add", "layer")


class TableError(ValueError):
    """A table under DIR that cannot be read as operator measurements (one line); ``problems``:
    the lines of the tables and groups left out, when there were several."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


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


@dataclass(frozen=True)
class Row:
    """One checked row of a table: its values parsed, where it came from."""

    where: str  # "<file> row <line>"
    model: str
    tp: int
    shape: tuple  # SHAPE_FIELDS' values
    values: dict[str, str]  # the row as ``opfit.groups_of`` reads it (normalised text)


@dataclass
class Tables:
    """What ``read_tables`` found: the groups to fit, one line per table or group left out."""

    groups: list[opfit.OpGroup]
    skipped: list[str]  # one line per table or (model, TP degree) left out of the fit
    files: int


def table_files(directory: Path) -> tuple[list[Path], list[str]]:
    """(every ``*.csv`` / ``*.csv.gz`` under ``directory``, once each, following links to folders;
    one line per folder that cannot be listed or link that leads nowhere)."""
    files: dict[str, Path] = {}
    problems: list[str] = []
    seen_dirs: set[str] = set()

    def unlistable(exc: OSError) -> None:
        problems.append(f"{exc.filename}: cannot list the folder ({exc.strerror or type(exc).__name__})")

    for folder, dirs, names in os.walk(directory, onerror=unlistable, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen_dirs:  # a link back to a folder already walked (a loop, or the same folder twice)
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if not name.endswith((".csv", ".csv.gz")):
                continue
            if not path.is_file():
                problems.append(f"{path}: not a readable file (a link to nothing, or not a regular file)")
                continue
            files.setdefault(os.path.realpath(path), path)
    return sorted(files.values()), problems


def _open(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")


def _int_field(row: dict, field: str) -> int:
    low, high = INT_FIELDS[field]
    text = row[field].strip()
    try:
        value = float(text)
    except ValueError:
        raise TableError(f"{field} must be an integer from {low} to {high}; got {text!r}") from None
    if not (math.isfinite(value) and value.is_integer() and low <= value <= high):
        raise TableError(f"{field} must be an integer from {low} to {high}; got {text!r}")
    return int(value)


def _time_field(row: dict, field: str) -> float:
    text = row[field].strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME_MS):
        raise TableError(f"{field} must be a time in ms from 0 to {MAX_TIME_MS:g}; got {text!r}")
    return value


def _gated(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise TableError(f"use_gated_mlp must be True or False; got {text!r}")
    return text.strip().lower() == "true"


def parse_row(row: dict, default_model: str) -> tuple[str, int, tuple, dict[str, str]]:
    """(model, TP degree, shape, normalised values) of one CSV row; ``TableError`` naming the
    first bad field (without the file and row, which the caller adds)."""
    if None in row:
        raise TableError(f"{len(row[None])} more field(s) than the header has columns")
    for field in ("model", *REQUIRED_COLUMNS):
        if field in row and (row[field] is None or not row[field].strip()):
            raise TableError(f"{field} is empty")
    ints = {field: _int_field(row, field) for field in INT_FIELDS}
    times = {field: _time_field(row, field) for field in TIME_FIELDS}
    gated = _gated(row["use_gated_mlp"])
    if ints["n_embd"] % ints["n_head"]:
        raise TableError(f"n_embd must be a multiple of n_head ({ints['n_head']}); got {ints['n_embd']}")
    if ints["n_kv_head"] > ints["n_head"] or ints["n_head"] % ints["n_kv_head"]:
        raise TableError(f"n_kv_head must divide n_head ({ints['n_head']}); got {ints['n_kv_head']}")
    values = {k: str(v) for k, v in ints.items()} | {k: repr(v) for k, v in times.items()}
    values["use_gated_mlp"] = str(gated)
    shape = (*(ints[f] for f in SHAPE_FIELDS[:-1]), gated)
    return row.get("model", "").strip() or default_model, ints["num_tensor_parallel_workers"], shape, values


def read_table(path: Path, default_model: str) -> tuple[list[Row], list[str]]:
    """(the rows of one table that parse, one problem line per row that does not);
    ``TableError`` for a table that cannot be read at all."""
    try:
        with _open(path) as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise TableError(f"{path}: empty file (no header line)")
            missing = [c for c in REQUIRED_COLUMNS if c not in reader.fieldnames]
            if missing:
                raise TableError(f"{path}: no column {missing[0]!r} ({len(missing)} of the Vidur mlp.csv format's "
                                 f"columns missing)")
            rows, problems = [], []
            for row in reader:
                where = f"{path} row {reader.line_num}"
                try:
                    rows.append(Row(where, *parse_row(row, default_model)))
                except TableError as exc:
                    problems.append(f"{where}: {exc}")
    except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
        raise TableError(f"{path}: cannot read the table ({type(exc).__name__}: "
                         f"{(str(exc).splitlines() or [''])[0]})") from None
    if not rows and not problems:
        raise TableError(f"{path}: no rows under the header (one row per token count)")
    return rows, problems


class _Accepted:
    """The rows of the tables accepted so far, with what later tables are checked against: one
    shape per model, each (model, TP degree) from one table (two tables of one, e.g. of two GPUs,
    would be fitted as one), no row twice."""

    def __init__(self) -> None:
        self.shapes: dict[str, Row] = {}
        self.keys: dict[tuple, Row] = {}
        self.groups: dict[tuple[str, int], Row] = {}
        self.rows: list[Row] = []
        self.tables = 0

    def conflicts(self, rows: list[Row]) -> list[str]:
        """One line per row of a table that disagrees with an accepted row or an earlier one of its own."""
        shapes, keys, out = dict(self.shapes), dict(self.keys), []
        for row in rows:
            first = shapes.setdefault(row.model, row)
            diff = [i for i, (a, b) in enumerate(zip(row.shape, first.shape)) if a != b]
            key = (row.model, tuple(sorted(row.values.items())))
            other = self.groups.get((row.model, row.tp))
            if other is not None:
                out.append(f"{row.where}: num_tensor_parallel_workers {row.tp} of model {row.model!r} is measured "
                           f"in {other.where.rsplit(' row ', 1)[0]} already (one table per model and TP degree)")
            elif diff:
                field = SHAPE_FIELDS[diff[0]]
                out.append(f"{row.where}: {field} {row.values[field]} differs from {first.values[field]} in "
                           f"{first.where} (model {row.model!r} has one shape)")
            elif key in keys:
                out.append(f"{row.where}: num_tokens {row.values['num_tokens']} is a copy of {keys[key].where} "
                           f"(every field equal)")
            else:
                keys[key] = row
        return out

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            self.shapes.setdefault(row.model, row)
            self.groups.setdefault((row.model, row.tp), row)
            self.keys[(row.model, tuple(sorted(row.values.items())))] = row
        self.rows += rows
        self.tables += 1


def _skip_line(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more bad row(s))" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"


def _group_problem(model: str, tp: int, rows: list[Row]) -> str | None:
    """Why a (model, TP degree) cannot be fitted, or None."""
    files = sorted({r.where.rsplit(" row ", 1)[0] for r in rows})
    where = f"{', '.join(files)}: model {model!r} TP {tp}"
    counts = {r.values["num_tokens"] for r in rows}
    if len(counts) < MIN_TOKEN_COUNTS:
        return f"{where}: num_tokens has {len(counts)} distinct value(s); a fit needs {MIN_TOKEN_COUNTS} or more"
    for field in TIME_FIELDS:
        if all(float(r.values[field]) == 0 for r in rows):
            return f"{where}: {field} is 0 in every row; a fit needs a positive time of each operator"
    return None


def read_tables(directory: Path, gpu: str, strict: bool = False) -> Tables:
    """The groups of every usable table under ``directory``. A table with a bad row, or one that
    disagrees with a table read before, is left out with one line; ``strict``: ``TableError``
    instead. ``TableError`` too when nothing usable is left."""
    if not directory.is_dir():
        raise TableError(f"--fit-ops: {directory} is not a directory")
    files, skipped = table_files(directory)
    if not files and not skipped:
        raise TableError(f"--fit-ops: no *.csv or *.csv.gz table under {directory}")
    accepted = _Accepted()
    for path in files:
        stem = path.name.removesuffix(".gz").removesuffix(".csv")
        default_model = path.parent.name if stem == "mlp" else stem
        try:
            rows, problems = read_table(path, default_model)
        except TableError as exc:
            skipped.append(str(exc))
            continue
        problems += accepted.conflicts(rows)
        if problems:
            skipped.append(_skip_line(problems))
        else:
            accepted.add(rows)
    by_group: dict[tuple[str, int], list[Row]] = {}
    for row in accepted.rows:
        by_group.setdefault((row.model, row.tp), []).append(row)
    kept: dict[tuple[str, int], list[dict]] = {}
    for (model, tp), rows in by_group.items():
        problem = _group_problem(model, tp, rows)
        if problem:
            skipped.append(problem)
        else:
            kept[(model, tp)] = [r.values for r in rows]
    if skipped and (strict or not kept):
        if strict or len(skipped) == 1:
            raise TableError(skipped[0])
        raise TableError(f"--fit-ops: nothing under {directory} can be fitted ({len(skipped)} problems, one line "
                         f"each above)", skipped)
    return Tables(opfit.groups_of(gpu, kept), skipped, accepted.tables)


def held_out_label(groups: list[opfit.OpGroup]):
    """(name, key) of the held-out check the tables allow, or None."""
    if len({g.model for g in groups}) > 1:
        return "leave one model out", lambda g: g.model
    if len({g.tp for g in groups}) > 1:
        return "leave one TP degree out", lambda g: g.tp
    return None


def error_lines(errors: list[opfit.GroupError]) -> list[str]:
    """Median |error| per operator kind, all token counts and at 64 tokens or fewer ("no rows"
    for a kind the held-out tables do not measure in that regime)."""
    out = []
    for regime in (None, "<=64"):
        cells = []
        for kind in REPORTED_KINDS:
            median, _ = opfit.summary(errors, kind, regime)
            cells.append(f"{kind} {median:.1%}" if math.isfinite(median) else f"{kind} no rows")
        out.append(f"{'all token counts' if regime is None else '<= 64 tokens'}: " + ", ".join(cells))
    return out


def yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that OmegaConf reads back unchanged: JSON's
    escapes (ASCII only, no line breaks) and OmegaConf's ``\\${`` for a literal ``${``."""
    return json.dumps(re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text))


def fit_profile(tables: Tables, spec: Spec, op_model: str, source: str) -> str:
    """The profile YAML text: spec, both models' constants, the held-out errors as comments."""
    groups = tables.groups
    peak, bw = spec.peak_flops, spec.mem_bandwidth
    fits = {model: opfit.fit(groups, peak, bw, model) for model in OP_MODELS}
    bad = [f"{model}.{key}" for model, fit in fits.items() for key, value in fit.items() if not math.isfinite(value)]
    if bad:
        raise TableError(f"--fit-ops: the fit of {bad[0]} did not converge on the tables under {source}")
    check = held_out_label(groups)
    lines = ["# GPU profile fitted by kvbench-validate --fit-ops on the measured operator tables in",
             f"# {json.dumps(source)} ({len({g.model for g in groups})} models, TP degrees "
             f"{sorted({g.tp for g in groups})}, {sum(len(g.tokens) for g in groups)} rows of {tables.files} tables"
             + (f"; {len(tables.skipped)} tables or groups left out, each named on stderr" if tables.skipped else "")
             + "). Spec figures: as given on the command line.",
             "# Held-out |error| median (model vs measured operator time):"]
    for model in OP_MODELS:
        if check is None:
            lines.append(f"#   {model}: none (one model and one TP degree: nothing to hold out)")
            continue
        name, key = check
        held = opfit.held_out(groups, key, peak, bw, model)
        lines += [f"#   {model}, {name}, {text}" for text in error_lines(held)]
    lines += [f"name: {yaml_string(spec.name)}", f"memory_bytes: {spec.memory_bytes:.12g}",
              f"peak_flops: {spec.peak_flops:.12g}", f"mem_bandwidth: {spec.mem_bandwidth:.12g}",
              f"host_bandwidth: {spec.host_bandwidth:.12g}"]
    if spec.interconnect_bandwidth is not None:
        lines.append(f"interconnect_bandwidth: {spec.interconnect_bandwidth:.12g}")
    if spec.peak_flops_fp32 is not None:
        lines.append(f"peak_flops_fp32: {spec.peak_flops_fp32:.12g}")
    origin = f"the measured operator tables in {json.dumps(source)} (kvbench-validate --fit-ops)"
    lines += ["count: 1", f"op_model: {op_model}", f"op_constants_from: {yaml_string(origin)}",
              "# roofline operator model (operators.py)"]
    lines += [f"{key}: {fits['roofline'][key]:.4g}" for key in OP_KEYS]
    lines.append("fixed_floor:  # the fixed_floor operator model's constants (op_model: fixed_floor)")
    lines += [f"  {key}: {value:.4g}" for key, value in fits["fixed_floor"].items()]
    return "\n".join(lines) + "\n"


MAX_NAME_BYTES = 200  # a file name (NAME.yaml), with room to spare (file systems allow 255)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Hydra config name that ``gpu=NAME`` selects, or None."""
    if not name.strip() or name != name.strip():
        return "it is empty or starts or ends with a space"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"it is {len(name.encode())} bytes; at most {MAX_NAME_BYTES}"
    bad = sorted({c for c in name if c in "/\\$" or not c.isprintable()})
    if bad:
        return f"it holds {bad[0]!r} (a folder, an escape or an interpolation to Hydra)"
    from hydra.core.override_parser.overrides_parser import OverridesParser  # start-up time: --fit-ops DIR only

    try:
        value = OverridesParser.create().parse_override(f"gpu={name}").value()
    except Exception:  # noqa: BLE001 - Hydra's parser raises its own exception types for any grammar error
        value = None
    if value != name:
        return "gpu=NAME would not read it back as that name"
    return None


def out_problem(out: Path, name: str, force: bool) -> str | None:
    """Why the profile cannot be written to ``out``, or None: it must be ``NAME.yaml`` (so that
    ``gpu=NAME`` finds it), and a target the one writer accepts (``kvbench.results.outputs``)."""
    if out.name != f"{name}.yaml":
        return f"--out {out}: the file must be named {name}.yaml so that gpu={name} selects it"
    try:
        check_target(out, force=force)
    except OutputError as exc:
        return str(exc)
    return None
