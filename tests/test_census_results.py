"""A census of the results readers from outside: aggregation, reader outputs, verification, reindex.

Each case builds a small results folder, runs one reader in-process (``kvbench-results``, the
sweep table, a figure's mean, ``verify_results.py --list-only``) and checks the right outcome:
a correct result, or a refusal (one line on stderr, exit 2 or, for verification, a named finding
and exit 1) with nothing written and nothing lost. ``python tests/test_census_results.py`` (with
PYTHONPATH naming the code to judge) prints how many cases come out right, silent (a wrong
result, no error), as a traceback or with data lost.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

# --------------------------------------------------------------------------- fixtures


def _write(root: Path, run_id: str, experiment: str = "cmp", **fields) -> Path:
    from kvbench.results.store import RUN_DIR_COLUMN, append_index_row, clean_summary, run_dir_for_index

    row = {"run_id": run_id, "experiment": experiment, "workload": "sharegpt", "model": "opt-13b",
           "allocator": "paged", "allocator_label": "paged", "block_size": 16, "backend": "sim",
           "request_rate": 1.0, "num_requests": 100, "kv_bytes": 1_000_000, "seed": 0,
           "max_concurrency": None, "request_throughput": 1.0, "mean_ttft_ms": 10.0, "p99_ttft_ms": 20.0,
           "mean_tpot_ms": 1.0, "overrides": None}
    row.update(fields)
    row = clean_summary(row)
    folder = root / "runs" / experiment / run_id  # summary.json is what readers use: no step tables
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(row, indent=1) + "\n")
    index = root / "index.jsonl"
    append_index_row(index, {**row, RUN_DIR_COLUMN: run_dir_for_index(folder, index)})
    return folder


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(root))] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif not path.is_dir():
            out[str(path.relative_to(root))] = "special"
    return out


def _rows(index: Path) -> list[dict]:
    rows = []
    for line in index.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


@dataclass
class Result:
    code: int | None
    out: str
    err: str
    root: Path
    before: dict[str, str]
    after: dict[str, str]
    index_rows_before: int

    @property
    def one_line(self) -> bool:
        return len(self.err.strip().splitlines()) == 1 and "Traceback" not in self.err

    @property
    def unchanged(self) -> bool:
        return self.before == self.after

    def csv(self) -> pd.DataFrame:
        return pd.read_csv(io.StringIO(self.out), keep_default_na=False)


class Lost(AssertionError):
    """The case lost data (an index row, a file) or overwrote what it must not."""


def _verify_module():
    import kvbench

    path = Path(kvbench.__file__).resolve().parent.parent / "scripts" / "verify_results.py"
    if "census_verify_results" not in sys.modules:
        spec = importlib.util.spec_from_file_location("census_verify_results", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["census_verify_results"] = module
        spec.loader.exec_module(module)
    return sys.modules["census_verify_results"]


def _call(fn: Callable[[], int | None]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = fn()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- the cases

@dataclass
class Case:
    name: str
    klass: str
    build: Callable[[Path], Callable[[], int | None]]  # makes the folder, returns the call
    check: Callable[[Result], bool]


CASES: list[Case] = []


def case(klass: str, name: str, check: Callable[[Result], bool]):
    def wrap(build):
        CASES.append(Case(name, klass, build, check))
        return build
    return wrap


def results_main(*argv: str) -> Callable[[], int]:
    def call() -> int:
        from kvbench.results.cli import main
        return main(list(argv))
    return call


def refused(result: Result) -> bool:
    """One line, exit 2, nothing written, nothing lost, no stdout."""
    return result.code == 2 and result.one_line and result.unchanged and not result.out.strip()


def flagged(*words: str) -> Callable[[Result], bool]:
    """A verification finding: exit 1, each word named on stdout, no traceback, nothing written."""
    def check(result: Result) -> bool:
        return (result.code == 1 and "Traceback" not in result.err + result.out and result.unchanged
                and all(w in result.out for w in words))
    return check


def refused_naming(*words: str) -> Callable[[Result], bool]:
    def check(result: Result) -> bool:
        return refused(result) and all(w in result.err for w in words)
    return check


def compared_rows(expected_rows: int, runs_each: int = 1) -> Callable[[Result], bool]:
    """--compare ... --format csv printed ``expected_rows`` rows, each averaging ``runs_each`` runs."""
    def check(result: Result) -> bool:
        if result.code != 0 or not result.unchanged:
            return False
        rows = result.csv()
        return len(rows) == expected_rows and set(rows["runs"].astype(int)) == {runs_each}
    return check


def _cmp(root: Path, *extra: str) -> Callable[[], int]:
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                        "--metrics", "request_throughput", "--format", "csv", *extra)


# ---- aggregation: runs that differ in one setting are never averaged ------------------------

KNOB_VALUES = [  # (setting, value of the first pair, value of the second pair)
    ("max_concurrency", None, 4), ("max_concurrency", 4, 8), ("block_size", 16, 32), ("max_num_seqs", None, 64),
    ("max_num_seqs", 128, 256), ("burstiness", 1.0, 0.5), ("chunked_prefill", False, True), ("gpu_count", 1, 2),
    ("gpu_count", None, 2), ("system", "vllm-2023", "vllm-v1"), ("scheduling", "prompt_first", "fcfs"),
    ("batching", "continuous", "static"), ("preemption", "recompute", "swap"), ("n", 1, 2), ("beam_width", 1, 4),
    ("prefix_len", None, 64), ("max_num_batched_tokens", 2048, 4096), ("request_rate", 1.0, 2.0),
    ("num_requests", 100, 200), ("model", "opt-13b", "opt-66b"), ("workload", "sharegpt", "alpaca"),
    ("gpu_profile", "a100-40gb", "a10g"), ("device", "sim", "cuda"), ("backend", "sim", "hf"),
    ("attention", None, "sdpa"), ("clock", "virtual", "wall"), ("ignore_eos", True, False),
    ("baseline", None, "static-max"), ("experiment", "cmp", "cmp-b"), ("kv_bytes", 1_000_000, 2_000_000),
    ("schema_extra_knob", None, "on"), ("time_scale", None, 2.0), ("overlong", None, "refuse"),
]


def _knob_case(column: str, first: object, second: object) -> None:
    @case("aggregation", f"compare splits runs differing in {column} ({first!r} vs {second!r})", compared_rows(4))
    def build(root: Path, column=column, first=first, second=second):
        for i, value in enumerate((first, second)):
            experiment = value if column == "experiment" else "cmp"
            fields = {} if column == "experiment" else {column: value}
            _write(root, f"p{i}", experiment=experiment, **fields, request_throughput=1.0 + i)
            _write(root, f"b{i}", experiment=experiment, allocator="buddy", reserve="max", allocator_label="orca-max",
                   **fields, request_throughput=3.0 + i)
        return _cmp(root)


for _column, _first, _second in KNOB_VALUES:
    _knob_case(_column, _first, _second)


@case("aggregation", "the issue's four-run compare: two groups, never an average", compared_rows(4))
def _four_runs(root: Path):
    _write(root, "p", request_throughput=1.0)
    _write(root, "p4", max_concurrency=4, request_throughput=2.0)
    _write(root, "b", allocator="buddy", reserve="max", allocator_label="orca-max", request_throughput=3.0)
    _write(root, "b4", allocator="buddy", reserve="max", allocator_label="orca-max", max_concurrency=4,
           request_throughput=4.0)
    return _cmp(root)


@case("aggregation", "a row of an older schema (no max_concurrency key) is not averaged with a newer one",
      compared_rows(2))
def _older_schema(root: Path):
    _write(root, "new", max_concurrency=4, request_throughput=2.0)
    index = root / "index.jsonl"
    row = _rows(index)[0] | {"run_id": "old", "run_dir": "runs/cmp/old", "request_throughput": 1.0}
    row.pop("max_concurrency")
    (root / "runs" / "cmp" / "old").mkdir(parents=True)
    (root / "runs" / "cmp" / "old" / "summary.json").write_text(json.dumps({k: v for k, v in row.items()
                                                                           if k != "run_dir"}))
    with open(index, "a") as f:
        f.write(json.dumps(row) + "\n")
    return _cmp(root)


def _seeds_averaged(result: Result) -> bool:
    if result.code != 0:
        return False
    rows = result.csv()
    return (list(rows["runs"]) == [2, 2] and "request_throughput sd" in rows.columns
            and math.isclose(rows["request_throughput"][0], 1.5) and rows["request_throughput sd"][0] > 0)


@case("aggregation", "runs differing only in the seed are averaged, with n and spread", _seeds_averaged)
def _seeds(root: Path):
    for seed in (0, 1):
        _write(root, f"p{seed}", seed=seed, request_throughput=1.0 + seed)
        _write(root, f"b{seed}", seed=seed, allocator="buddy", reserve="max", allocator_label="orca-max",
               request_throughput=3.0 + seed)
    return _cmp(root)


def _one_group_with_ratio(result: Result) -> bool:
    if result.code != 0:
        return False
    rows = result.csv()
    return len(rows) == 2 and set(rows["group"]) == {"all selected runs"} and rows["request_throughput/base"].notna().all()


@case("aggregation", "paged vs vattention on one requested budget (pools rounded apart) get a ratio",
      _one_group_with_ratio)
def _budget(root: Path):
    asked = json.dumps(["experiment=cmp", "engine.kv_cache_bytes=1000000"])
    _write(root, "p", kv_bytes=999_936, overrides=asked)
    _write(root, "v", allocator="vattention", allocator_label="vattention", block_size=16, kv_bytes=983_040,
           page_bytes=2097152, overrides=asked, request_throughput=2.0)
    return _cmp(root)


@case("aggregation", "two requested budgets stay two groups even when recorded as overrides", compared_rows(4))
def _two_budgets(root: Path):
    for budget in (1_000_000, 2_000_000):
        asked = json.dumps(["experiment=cmp", f"engine.kv_cache_bytes={budget}"])
        _write(root, f"p{budget}", kv_bytes=budget - 64, overrides=asked)
        _write(root, f"v{budget}", allocator="vattention", allocator_label="vattention", kv_bytes=budget - 128,
               page_bytes=2097152, overrides=asked)
    return _cmp(root)


@case("aggregation", "a duration-bounded stream: counts that follow the seed do not split seeds",
      lambda r: r.code == 0 and list(r.csv()["runs"]) == [2, 2])
def _duration_counts(root: Path):
    for seed, count in ((0, 7142), (1, 7160)):
        asked = json.dumps(["experiment=cmp", f"seed={seed}"])
        _write(root, f"p{seed}", seed=seed, num_requests=count, overrides=asked)
        _write(root, f"b{seed}", seed=seed, num_requests=count + 3, allocator="buddy", reserve="max",
               allocator_label="orca-max", overrides=asked)
    return _cmp(root)


@case("aggregation", "vattention page sizes within one label are separate rows with the page in the label",
      lambda r: r.code == 0 and len(r.csv()) == 3 and set(r.csv()["runs"]) == {1})
def _pages(root: Path):
    _write(root, "p")
    for page in (65536, 2097152):
        _write(root, f"v{page}", allocator="vattention", allocator_label="vattention-64k", page_bytes=page,
               request_throughput=page / 65536)
    return _cmp(root)


@case("aggregation", "paged block sizes within one label are labelled rows of one group",
      lambda r: r.code == 0 and sorted(r.csv()["allocator_label"]) == ["orca-max", "paged (block_size=16)",
                                                                       "paged (block_size=32)"])
def _blocks(root: Path):
    _write(root, "b", allocator="buddy", reserve="max", allocator_label="orca-max")
    _write(root, "p16")
    _write(root, "p32", block_size=32, request_throughput=2.0)
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline",
                        "orca-max", "--metrics", "request_throughput", "--format", "csv")


@case("aggregation", "a metric that is not a number is an error naming the run", refused_naming("p1", "request_throughput"))
def _text_metric(root: Path):
    _write(root, "p0")
    _write(root, "p1", request_throughput="fast")
    return _cmp(root)


@case("aggregation", "a nested metric value is an error, not dropped", refused_naming("request_throughput"))
def _nested_metric(root: Path):
    _write(root, "p0")
    index = root / "index.jsonl"
    row = _rows(index)[0] | {"run_id": "p1", "request_throughput": [1, 2]}
    with open(index, "a") as f:
        f.write(json.dumps(row) + "\n")
    return _cmp(root)


@case("aggregation", "a null metric is not applicable: averaged over the runs that have it",
      lambda r: r.code == 0 and math.isclose(r.csv()["request_throughput"][0], 2.0))
def _null_metric(root: Path):
    _write(root, "p0", request_throughput=None)
    _write(root, "p1", seed=1, request_throughput=2.0)
    return _cmp(root)


@case("aggregation", "baseline 4 against a max_concurrency column holding null and 4",
      lambda r: r.code == 0 and sorted(r.csv()["max_concurrency"].astype(str)) == ["4", "null"])
def _baseline_type(root: Path):
    _write(root, "a", max_concurrency=None)
    _write(root, "b", max_concurrency=4, request_throughput=2.0)
    return results_main("--index", str(root / "index.jsonl"), "--compare", "max_concurrency", "--baseline", "4",
                        "--metrics", "request_throughput", "--format", "csv")


@case("aggregation", "three max_concurrency values compare without a traceback",
      lambda r: r.code == 0 and len(r.csv()) == 3)
def _three_values(root: Path):
    for i, value in enumerate((None, 4, 8)):
        _write(root, f"r{i}", max_concurrency=value, request_throughput=1.0 + i)
    return results_main("--index", str(root / "index.jsonl"), "--compare", "max_concurrency", "--baseline", "null",
                        "--metrics", "request_throughput", "--format", "csv")


@case("aggregation", "baseline written as a float matches an integer column",
      lambda r: r.code == 0 and len(r.csv()) == 2 and r.csv()["request_throughput/base"].notna().all())
def _float_baseline(root: Path):
    _write(root, "a", block_size=16)
    _write(root, "b", block_size=32, request_throughput=2.0)
    return results_main("--index", str(root / "index.jsonl"), "--compare", "block_size", "--baseline", "16.0",
                        "--metrics", "request_throughput", "--format", "csv")


@case("aggregation", "an unknown baseline names the values and exits 2", refused_naming("orca-max"))
def _unknown_baseline(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "orca-max")


@case("aggregation", "compare on an unknown column is one line", refused_naming("nope"))
def _unknown_compare(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "nope", "--baseline", "x")


@case("aggregation", "an unknown metric is one line", refused_naming("nope"))
def _unknown_metric(root: Path):
    _write(root, "p")
    return _cmp(root, "--metrics", "nope")


@case("aggregation", "an empty --metrics is one line", refused)
def _empty_metrics(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                        "--metrics", ",")


@case("aggregation", "--compare without --baseline is one line", refused_naming("--baseline"))
def _no_baseline(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label")


@case("aggregation", "the markdown compare of the four runs shows four rows of one run each",
      lambda r: r.code == 0 and r.out.count("| paged | 1 |") == 2 and r.out.count("| orca-max | 1 |") == 2)
def _markdown_four(root: Path):
    _four_runs(root)
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                        "--metrics", "request_throughput", "--format", "markdown")


def _sweep_table_shows(column: str) -> Callable[[Result], bool]:
    return lambda r: r.code == 0 and column in r.out.splitlines()[0]


def _sweep_case(column: str, first: object, second: object) -> None:
    @case("aggregation", f"sweep table: jobs alike in swept values show {column}", _sweep_table_shows(column))
    def build(root: Path, column=column, first=first, second=second):
        from kvbench.run.sweep import format_sweep_table

        rows = [{"allocator": "paged", "status": "ok", "run_id": f"r{i}", column: v, "request_throughput": 1.0 + i}
                for i, v in enumerate((first, second))]

        def call() -> int:
            print(format_sweep_table(rows, ["allocator"]))
            return 0
        return call


for _column, _first, _second in (("max_concurrency", None, 4), ("burstiness", 1.0, 0.5),
                                 ("chunked_prefill", False, True)):
    _sweep_case(_column, _first, _second)


def _figure_case(column: str, first: object, second: object) -> None:
    def never_averaged(result: Result) -> bool:
        return result.code == 2 and result.one_line and "differ" in result.err

    @case("aggregation", f"a figure's mean refuses runs differing in {column}", never_averaged)
    def build(root: Path, column=column, first=first, second=second):
        from paper_figs import common

        frame = pd.DataFrame({"label": ["paged", "paged"], "workload": ["sharegpt"] * 2, column: [first, second],
                              "mem_token_frac": [0.5, 0.7], "seed": [0, 0]})

        def call() -> int:
            try:
                means = common.mean_by(frame, ["workload", "label"], ["mem_token_frac"])
            except ValueError as exc:
                print(f"figure: {exc}", file=sys.stderr)
                return 2
            print(means.to_string())
            return 0
        return call


for _column, _first, _second in (("max_concurrency", None, 4), ("block_size", 16, 32), ("gpu_count", 1, 2)):
    _figure_case(_column, _first, _second)


# ---- reader outputs: flags that do nothing are refused, outputs never destroy ----------------

def _flag_case(name: str, *argv: str, word: str) -> None:
    @case("outputs", name, refused_naming(word))
    def build(root: Path, argv=argv):
        _write(root, "p")
        return results_main("--index", str(root / "index.jsonl"), *[a.replace("{root}", str(root)) for a in argv])


_flag_case("--baseline without --compare", "--baseline", "paged", word="--baseline")
_flag_case("--metrics without --compare", "--metrics", "request_throughput", word="--metrics")
_flag_case("--output without --compare or --export", "--output", "{root}/out.txt", word="--output")
_flag_case("--compare with --export", "--compare", "allocator_label", "--baseline", "paged", "--export", "json",
           word="--export")
_flag_case("--format with --export", "--export", "csv", "--format", "csv", word="--format")
_flag_case("--format markdown with --export json", "--export", "json", "--format", "markdown", word="--format")
_flag_case("--format bad", "--format", "bad", word="bad")
_flag_case("--export bad", "--export", "xml", word="xml")
_flag_case("an unknown flag", "--frobnicate", word="frobnicate")
_flag_case("--reindex with --compare", "--reindex", "--compare", "allocator_label", word="--reindex")
_flag_case("--clean with --export", "--clean", "--export", "json", word="--clean")
_flag_case("--reindex with --output", "--reindex", "--output", "{root}/x.json", word="--reindex")
_flag_case("--force without --output", "--export", "csv", "--force", word="--force")
_flag_case("--export json --output the index", "--export", "json", "--output", "{root}/index.jsonl", word="index")
_flag_case("--export csv --output the index", "--export", "csv", "--output", "{root}/index.jsonl", word="index")
_flag_case("--compare --output the index", "--compare", "allocator_label", "--baseline", "paged", "--output",
           "{root}/index.jsonl", word="index")
_flag_case("--export --output the index lock", "--export", "json", "--output", "{root}/index.jsonl.lock", word="index")
_flag_case("--export --output a run's summary.json", "--export", "json", "--output",
           "{root}/runs/cmp/p/summary.json", word="run")
_flag_case("--export --output a run's steps.parquet", "--export", "csv", "--output",
           "{root}/runs/cmp/p/steps.parquet", word="run")
_flag_case("--export --output a new file inside a run folder", "--export", "csv", "--output",
           "{root}/runs/cmp/p/extra.csv", word="run")
_flag_case("--export --output into runs/", "--export", "csv", "--output", "{root}/runs/sel.csv", word="run")
_flag_case("--export --output a folder", "--export", "csv", "--output", "{root}/runs", word="--output")
_flag_case("--export --output in a missing folder", "--export", "csv", "--output", "{root}/nope/sel.csv",
           word="--output")
_flag_case("--export --output the index by another spelling", "--export", "json", "--output",
           "{root}/runs/../index.jsonl", word="index")


@case("outputs", "--export --output onto a symlink is refused, the link kept", refused_naming("symbolic link"))
def _symlink(root: Path):
    _write(root, "p")
    (root / "target.json").write_text("keep\n")
    (root / "link.json").symlink_to(root / "target.json")
    return results_main("--index", str(root / "index.jsonl"), "--export", "json", "--output", str(root / "link.json"))


@case("outputs", "--export --output onto a symlink to the index is refused", refused_naming("symbolic link"))
def _symlink_index(root: Path):
    _write(root, "p")
    (root / "link.jsonl").symlink_to(root / "index.jsonl")
    return results_main("--index", str(root / "index.jsonl"), "--export", "json", "--output", str(root / "link.jsonl"))


@case("outputs", "--export --output onto a named pipe is refused", refused_naming("regular"))
def _fifo(root: Path):
    _write(root, "p")
    os.mkfifo(root / "pipe")
    return results_main("--index", str(root / "index.jsonl"), "--export", "csv", "--output", str(root / "pipe"))


@case("outputs", "--compare --output onto a named pipe is refused", refused_naming("regular"))
def _fifo_compare(root: Path):
    _write(root, "p")
    os.mkfifo(root / "pipe")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                        "--output", str(root / "pipe"))


def _wrote(name: str, check: Callable[[str], bool]) -> Callable[[Result], bool]:
    def ok(result: Result) -> bool:
        path = result.root / name
        changed = {k for k in set(result.before) | set(result.after) if result.before.get(k) != result.after.get(k)}
        return result.code == 0 and changed == {name} and path.is_file() and check(path.read_text())
    return ok


@case("outputs", "--export json --output a new file writes only it", _wrote("sel.json", lambda t: len(json.loads(t)) == 2))
def _export_new(root: Path):
    _write(root, "p")
    _write(root, "q", seed=1)
    return results_main("--index", str(root / "index.jsonl"), "--export", "json", "--output", str(root / "sel.json"))


@case("outputs", "--export csv --output --force replaces an existing regular file",
      _wrote("sel.csv", lambda t: "run_id" in t))
def _export_replace(root: Path):
    _write(root, "p")
    (root / "sel.csv").write_text("old\n")
    return results_main("--index", str(root / "index.jsonl"), "--export", "csv", "--output", str(root / "sel.csv"),
                        "--force")


@case("outputs", "--export csv --output onto an existing file without --force is refused", refused_naming("--force"))
def _export_no_force(root: Path):
    _write(root, "p")
    (root / "sel.csv").write_text("old\n")
    return results_main("--index", str(root / "index.jsonl"), "--export", "csv", "--output", str(root / "sel.csv"))


@case("outputs", "--compare --output writes the comparison to the file", _wrote("cmp.txt", lambda t: "paged" in t))
def _compare_output(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--compare", "allocator_label", "--baseline", "paged",
                        "--output", str(root / "cmp.txt"))


@case("outputs", "a nested value in a summary exports as JSON",
      lambda r: r.code == 0 and json.loads(r.out)[0]["extra"] == {"a": [1, 2]})
def _nested_export(root: Path):
    _write(root, "p")
    index = root / "index.jsonl"
    row = _rows(index)[0] | {"extra": {"a": [1, 2]}}
    index.write_text(json.dumps(row) + "\n")
    return results_main("--index", str(index), "--export", "json")


@case("outputs", "a nested value in a summary exports as CSV",
      lambda r: r.code == 0 and "extra" in r.out.splitlines()[0])
def _nested_csv(root: Path):
    _write(root, "p")
    index = root / "index.jsonl"
    index.write_text(json.dumps(_rows(index)[0] | {"extra": [1, 2]}) + "\n")
    return results_main("--index", str(index), "--export", "csv")


def _nonfinite_index(root: Path, value: object) -> Path:
    _write(root, "p")
    index = root / "index.jsonl"
    index.write_text(json.dumps(_rows(index)[0] | {"nonfinite": value}) + "\n")
    return index


@case("outputs", "an empty nonfinite field: export works and drops it",
      lambda r: r.code == 0 and "nonfinite" not in json.loads(r.out)[0])
def _empty_nonfinite_export(root: Path):
    return results_main("--index", str(_nonfinite_index(root, "")), "--export", "json")


@case("outputs", "an empty nonfinite field: compare works", lambda r: r.code == 0 and len(r.csv()) == 1)
def _empty_nonfinite_compare(root: Path):
    _nonfinite_index(root, "")
    return _cmp(root)


@case("outputs", "a null nonfinite field: the table works", lambda r: r.code == 0 and "paged" in r.out)
def _null_nonfinite(root: Path):
    return results_main("--index", str(_nonfinite_index(root, None)), "--columns", "allocator_label")


for _value in ("request_rate", "request_rate=fast", "=inf", 5, "request_throughput=inf"):
    def _bad_nonfinite(value=_value):
        @case("outputs", f"a bad nonfinite field {value!r} is one line naming the index line",
              refused_naming("nonfinite", "index.jsonl:1"))
        def build(root: Path):
            return results_main("--index", str(_nonfinite_index(root, value)), "--export", "json")
    _bad_nonfinite()


@case("outputs", "an infinite rate round-trips through export", lambda r: r.code == 0 and
      json.loads(r.out)[0]["nonfinite"] == "request_rate=inf" and json.loads(r.out)[0]["request_rate"] is None)
def _inf_export(root: Path):
    _write(root, "p", request_rate=math.inf)
    return results_main("--index", str(root / "index.jsonl"), "--export", "json")


@case("outputs", "--format csv of the plain table still works", lambda r: r.code == 0 and r.out.startswith("experiment,"))
def _plain_csv(root: Path):
    _write(root, "p")
    return results_main("--index", str(root / "index.jsonl"), "--format", "csv", "--columns", "allocator_label")


@case("outputs", "a vattention-64k row that used 2 MiB pages is not labelled 64k",
      lambda r: r.code == 0 and "vattention-64k" not in r.out and "vattention" in r.out)
def _page_label(root: Path):
    _write(root, "v", allocator="vattention", allocator_label="vattention-64k", page_bytes=2097152)
    return results_main("--index", str(root / "index.jsonl"), "--columns", "allocator_label", "--format", "csv")


@case("outputs", "a vattention run with 64 KiB pages keeps its label",
      lambda r: r.code == 0 and "vattention-64k" in r.out)
def _page_label_kept(root: Path):
    _write(root, "v", allocator="vattention", allocator_label="vattention-64k", page_bytes=65536)
    return results_main("--index", str(root / "index.jsonl"), "--columns", "allocator_label", "--format", "csv")


# ---- reindex: never loses a row ----------------------------------------------------------

def _reindex_keeps(result: Result, rows: int) -> bool:
    return result.code == 0 and len(_rows(result.root / "index.jsonl")) == rows


@case("reindex", "--reindex without runs/ is refused, the index untouched", refused_naming("runs/"))
def _no_runs(root: Path):
    _write(root, "p")
    _write(root, "q")
    os.rename(root / "runs", root / "moved")
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


@case("reindex", "--reindex with runs/ a file is refused", refused_naming("runs/"))
def _runs_file(root: Path):
    _write(root, "p")
    os.rename(root / "runs", root / "moved")
    (root / "runs").write_text("not a folder\n")
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


@case("reindex", "--reindex keeps the row of a run whose folder is gone", lambda r: _reindex_keeps(r, 2))
def _gone_folder(root: Path):
    _write(root, "p")
    gone = _write(root, "q")
    for path in gone.iterdir():
        path.unlink()
    gone.rmdir()
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


@case("reindex", "--reindex says how many rows it kept without a folder",
      lambda r: r.code == 0 and "kept whose run dir is gone" in r.out)
def _gone_folder_said(root: Path):
    return _gone_folder(root)


@case("reindex", "--reindex keeps a row whose summary.json is torn", lambda r: _reindex_keeps(r, 2))
def _torn(root: Path):
    _write(root, "p")
    (_write(root, "q") / "summary.json").write_text('{"run_id": "q", "request_thr')
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


@case("reindex", "--reindex keeps a row of a run stored outside runs/", lambda r: _reindex_keeps(r, 2))
def _outside(root: Path):
    from kvbench.results.store import write_run

    _write(root, "p")
    write_run(root.parent / f"{root.name}-elsewhere" / "o", {"run_id": "o", "experiment": "cmp"}, pd.DataFrame(),
              pd.DataFrame(), root / "index.jsonl")
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


@case("reindex", "--reindex adds a finished run that lacks a row", lambda r: _reindex_keeps(r, 2))
def _unindexed(root: Path):
    _write(root, "p")
    _write(root, "q")
    index = root / "index.jsonl"
    index.write_text(index.read_text().splitlines()[0] + "\n")
    return results_main("--index", str(index), "--reindex")


@case("reindex", "--reindex with an empty runs/ keeps every row", lambda r: _reindex_keeps(r, 2))
def _empty_runs(root: Path):
    _write(root, "p")
    _write(root, "q")
    os.rename(root / "runs", root / "moved")
    (root / "runs").mkdir()
    return results_main("--index", str(root / "index.jsonl"), "--reindex")


# ---- verification: a tampered store is named, never passed --------------------------------

def _verify(root: Path, *extra: str) -> Callable[[], int]:
    def call() -> int:
        return _verify_module().main(["--root", str(root), "--sample", "0", "--list-only", *extra])
    return call


def _store(root: Path, runs: int = 3) -> Path:
    for i in range(runs):
        _write(root, f"r{i}", seed=i, request_throughput=1.0 + i)
    return root / "index.jsonl"


def _edit_index(index: Path, number: int, **fields) -> None:
    lines = index.read_text().splitlines()
    lines[number] = json.dumps(json.loads(lines[number]) | fields)
    index.write_text("\n".join(lines) + "\n")


@case("verification", "a clean store passes", lambda r: r.code == 0 and r.unchanged)
def _clean_store(root: Path):
    _store(root)
    return _verify(root)


@case("verification", "a metric tripled in index.jsonl is named", flagged("request_throughput", "r1"))
def _tripled(root: Path):
    _edit_index(_store(root), 1, request_throughput=6.0)
    return _verify(root)


@case("verification", "a setting changed in index.jsonl is named", flagged("max_concurrency"))
def _setting_edit(root: Path):
    _edit_index(_store(root), 0, max_concurrency=4)
    return _verify(root)


@case("verification", "a column dropped from an index row is named", flagged("mean_ttft_ms"))
def _column_dropped(root: Path):
    index = _store(root)
    lines = index.read_text().splitlines()
    row = json.loads(lines[2])
    row.pop("mean_ttft_ms")
    lines[2] = json.dumps(row)
    index.write_text("\n".join(lines) + "\n")
    return _verify(root)


@case("verification", "a deleted run folder whose row stays is named", flagged("r2", "no run folder"))
def _deleted(root: Path):
    _store(root)
    folder = root / "runs" / "cmp" / "r2"
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    return _verify(root)


@case("verification", "an unknown row appended is named", flagged("ghost"))
def _appended(root: Path):
    index = _store(root)
    row = _rows(index)[0] | {"run_id": "ghost", "run_dir": "runs/cmp/ghost"}
    with open(index, "a") as f:
        f.write(json.dumps(row) + "\n")
    return _verify(root)


@case("verification", "an appended row pointing at another run's folder is named", flagged("ghost"))
def _appended_alias(root: Path):
    index = _store(root)
    row = _rows(index)[0] | {"run_id": "ghost"}
    with open(index, "a") as f:
        f.write(json.dumps(row) + "\n")
    return _verify(root)


@case("verification", "a row indexed twice is named", flagged("twice"))
def _twice(root: Path):
    index = _store(root)
    with open(index, "a") as f:
        f.write(index.read_text().splitlines()[0] + "\n")
    return _verify(root)


@case("verification", "a torn summary.json is named", flagged("r1", "summary.json"))
def _torn_summary(root: Path):
    _store(root)
    (root / "runs" / "cmp" / "r1" / "summary.json").write_text('{"run_id": "r1", "request_')
    return _verify(root)


@case("verification", "a summary.json that is a list is named", flagged("r0", "summary"))
def _list_summary(root: Path):
    _store(root)
    (root / "runs" / "cmp" / "r0" / "summary.json").write_text("[1, 2]\n")
    return _verify(root)


@case("verification", "overrides that are not JSON are named", flagged("overrides"))
def _bad_overrides(root: Path):
    _store(root)
    path = root / "runs" / "cmp" / "r0" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"overrides": "[allocator=paged"}))
    _edit_index(root / "index.jsonl", 0, overrides="[allocator=paged")
    return _verify(root)


@case("verification", "overrides that are a JSON object are named", flagged("overrides"))
def _dict_overrides(root: Path):
    _store(root)
    path = root / "runs" / "cmp" / "r0" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"overrides": '{"a": 1}'}))
    _edit_index(root / "index.jsonl", 0, overrides='{"a": 1}')
    return _verify(root)


@case("verification", "a bad nonfinite field in an index row is named", flagged("nonfinite"))
def _bad_nonfinite_row(root: Path):
    _edit_index(_store(root), 1, nonfinite="request_rate=fast")
    return _verify(root)


@case("verification", "a bad nonfinite field in a summary.json is named", flagged("nonfinite"))
def _bad_nonfinite_summary(root: Path):
    _store(root)
    path = root / "runs" / "cmp" / "r2" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"nonfinite": "oops"}))
    return _verify(root)


@case("verification", "a torn index line is named", flagged("not a JSON line"))
def _torn_line(root: Path):
    index = _store(root)
    lines = index.read_text().splitlines()
    lines.insert(1, '{"run_id": "x", "requ')
    index.write_text("\n".join(lines) + "\n")
    return _verify(root)


@case("verification", "a finished run with no index row is named", flagged("no row"))
def _no_row(root: Path):
    index = _store(root)
    index.write_text("\n".join(index.read_text().splitlines()[:2]) + "\n")
    return _verify(root)


@case("verification", "a summary.json whose metric was edited is named", flagged("request_throughput"))
def _summary_edit(root: Path):
    _store(root)
    path = root / "runs" / "cmp" / "r0" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"request_throughput": 9.0}))
    return _verify(root)


@case("verification", "an empty nonfinite field in an index row is not a difference", lambda r: r.code == 0)
def _empty_nonfinite_row(root: Path):
    _edit_index(_store(root), 0, nonfinite="")
    return _verify(root)


@case("verification", "a number written as text in the index is named", flagged("request_throughput"))
def _text_number(root: Path):
    _edit_index(_store(root), 0, request_throughput="1.0")
    return _verify(root)


@case("verification", "a nested index under beyond/ is checked too", flagged("request_throughput"))
def _nested_index(root: Path):
    _store(root)
    _store(root / "beyond", runs=2)
    _edit_index(root / "beyond" / "index.jsonl", 0, request_throughput=7.0)
    return _verify(root)


# --------------------------------------------------------------------------- running


def run_case(item: Case, root: Path) -> tuple[str, str]:
    """(outcome, detail): right, silent, traceback or lost."""
    root.mkdir(parents=True, exist_ok=True)
    call = item.build(root)
    index = root / "index.jsonl"
    before = _snapshot(root)
    rows_before = len(_rows(index)) if index.is_file() else 0
    try:
        code, out, err = _call(call)
    except Exception as exc:  # noqa: BLE001 - the census counts an escaped exception as a traceback
        return "traceback", f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    after = _snapshot(root)
    result = Result(code, out, err, root, before, after, rows_before)
    try:
        ok = item.check(result)
    except Exception as exc:  # noqa: BLE001 - an unreadable output is a wrong one
        ok, err = False, err + f"\n(check: {type(exc).__name__}: {exc})"
    if ok:
        return "right", ""
    if "Traceback" in err:
        return "traceback", err.strip().splitlines()[-1][:160]
    rows_after = len(_rows(index)) if index.is_file() and not index.is_symlink() else 0
    gone = [k for k in before if k not in after]
    if rows_after < rows_before or gone or (index.is_file() and before.get("index.jsonl") != after.get("index.jsonl")
                                             and not item.klass == "reindex"):
        return "lost", f"index rows {rows_before} -> {rows_after}; gone: {gone[:3]}"
    for name in ("link.json", "link.jsonl", "pipe"):
        path = root / name
        if name in before and not (path.is_symlink() or (path.exists() and not path.is_file())):
            return "lost", f"{name} replaced"
    return "silent", f"exit {code}; err {err.strip()[:120]!r}; out {out.strip()[:120]!r}"


@pytest.mark.parametrize("item", CASES, ids=[c.name for c in CASES])
def test_census_case(item: Case, tmp_path: Path) -> None:
    outcome, detail = run_case(item, tmp_path / "results")
    assert outcome == "right", f"{item.klass}: {item.name}: {outcome}: {detail}"


def test_the_census_has_at_least_90_cases() -> None:
    assert len(CASES) >= 90 and len({c.name for c in CASES}) == len(CASES)


def main() -> int:
    import tempfile
    import warnings

    warnings.simplefilter("ignore")
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="census-results-") as tmp:
        for i, item in enumerate(CASES):
            outcome, detail = run_case(item, Path(tmp) / f"c{i}" / "results")
            counts.setdefault(item.klass, {k: 0 for k in ("right", "silent", "traceback", "lost")})[outcome] += 1
            if outcome != "right":
                print(f"{outcome:9s} {item.klass:12s} {item.name}: {detail}")
    total = {k: sum(c[k] for c in counts.values()) for k in ("right", "silent", "traceback", "lost")}
    print(f"{'class':14s} {'cases':>5s} {'right':>5s} {'silent':>6s} {'trace':>5s} {'lost':>4s}")
    for klass, c in [*counts.items(), ("all", total)]:
        print(f"{klass:14s} {sum(c.values()):5d} {c['right']:5d} {c['silent']:6d} {c['traceback']:5d} {c['lost']:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
