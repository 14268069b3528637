"""The census of issue 54 ("every setting acts or is refused; every tool writes only what it owns"):
cases generated from its six classes, each run in-process and classified by outcome.

- ``reads``: every conditional row of ``kvbench.config.reads.READS`` given a value on a baseline
  where its condition fails (refused) or holds (runs), by ``kvbench`` and ``kvbench-capacity``;
- ``grammar``: every numeric option of every tool x {inf, nan, -1, 0, 1e400, abc, given twice},
  overrides among the options, ``++key=`` for keys always read;
- ``writer``: every tool that writes x every kind of target;
- ``tables``: every column of the operator tables x {empty, nan, inf, -1, text}, and bad files;
- ``dropped``: each analysis x each reason a selected run is left out;
- ``signals``: the tools that run work, SIGINT and SIGTERM (real processes; slow tier only).

Outcomes: ``clear`` (a refusal due: exit 2, one line, nothing changed), ``ok`` (a run due that
ran, or a drop named on stderr), ``silent`` (exit 0 on bad input, or a drop not named),
``unclear`` (refused or failed in more than one line, or a right input refused), ``written``
(refused, but something new was written), ``traceback``, ``lost`` (a file that was there changed
or went, or the results index is not strict JSONL afterwards) and ``hang`` (past ``LIMIT_S``).

    PYTHONPATH=. .venv/bin/python -m pytest -q -m slow tests/test_census_iv.py -s   # prints the table
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.test_tool_outputs import snapshot  # the workspace before and after a case

LIMIT_S = 120  # a case still running after this is a hang
OUTCOMES = ("clear", "ok", "silent", "unclear", "written", "traceback", "lost", "hang")
CLASSES = ("reads", "grammar", "writer", "tables", "dropped", "signals")
TINY = ["allocator=paged", "workload.num_requests=4", "workload.prompt_len=32", "workload.output_len=32",
        "engine.kv_cache_bytes=4000000000", "progress=false", "logger=none"]


@dataclass(frozen=True)
class Case:
    name: str
    cls: str  # one of CLASSES
    tool: str  # kvbench (its pre-check), kvbench-capacity, -results, -plot, -report, -validate
    argv: Callable[[Path], list[str]]  # the workspace -> the command line
    expect: str  # refuse | ok | any (runs or is refused) | word (exit 0 with ``word`` on stderr; or a refusal)
    setup: Callable[[Path], None] | None = None  # changes to the workspace before the run
    word: str = ""
    replaces: str = ""  # a folder of the workspace whose files a run due may replace (its --out)


# ------------------------------------------------------------------------------ the workspace
def strict_index(path: Path) -> bool:
    """Every line of the index one JSON object, no NaN or Infinity tokens."""
    if not path.exists():
        return True

    def refuse(token: str):
        raise ValueError(token)
    try:
        return all(isinstance(json.loads(line, parse_constant=refuse), dict)
                   for line in path.read_text().splitlines())
    except (ValueError, UnicodeDecodeError):
        return False


def _appended(before: tuple, after: tuple | None) -> bool:
    return after is not None and before[0] == after[0] == "file" and after[1].startswith(before[1])


def _lost(before: dict, after: dict) -> list[str]:
    """Paths that were there and changed or went (an index only appended to is kept)."""
    return [k for k, v in before.items() if after.get(k) != v
            and not (k.endswith("index.jsonl") and _appended(v, after.get(k)))]


# ------------------------------------------------------------------------------ running one case
class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def call(main: Callable[[list[str]], int | None], argv: list[str]) -> tuple[object, str]:
    """Run ``main(argv)`` with stdout/stderr captured; (exit code, or 'traceback'/'hang'; stderr)."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except _Hang:
        code = "hang"
    except Exception:  # noqa: BLE001 - what the census counts
        code = "traceback"
        err.write(traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return (0 if code is None else code), err.getvalue()


def _precheck(argv: list[str]) -> int:
    """``kvbench``'s pre-check, as its entry point reports it: one line and exit 2, or 0."""
    import sys

    from kvbench.run.precheck import precheck

    error = precheck(argv)
    if error is None:
        return 0
    print(f"kvbench: error: {error}", file=sys.stderr)
    return 2


def tool_main(tool: str) -> Callable[[list[str]], int | None]:
    if tool == "kvbench":
        return _precheck
    if tool == "kvbench-capacity":
        from kvbench.tools.capacity import main
    elif tool == "kvbench-results":
        from kvbench.results.cli import main
    elif tool == "kvbench-report":
        from kvbench.tools.report import main
    elif tool == "kvbench-plot":
        from kvbench.tools.plot import main
    else:
        from kvbench.sim.validate import main
    return main


def classify(case: Case, code: object, err: str, before: dict, after: dict, index_ok: bool) -> str:
    if code == "hang":
        return "hang"
    if code == "traceback" or "Traceback (most recent call last)" in err:
        return "traceback"
    kept = {k: v for k, v in before.items() if not (case.replaces and k.startswith(case.replaces))}
    if not index_ok or _lost(kept, after):
        return "lost"
    lines = [line for line in err.strip().splitlines() if line.strip()]
    new = set(after) - set(before)
    if case.expect == "refuse":
        if code == 0:
            return "silent"
        if code != 2 or len(lines) != 1:
            return "unclear"
        return "written" if new else "clear"
    if case.expect == "word":
        if code == 2 and len(lines) == 1 and not new:
            return "clear"
        if code == 0:
            return "ok" if case.word in err and not _warned(lines) else "silent"
        return "unclear"
    if case.expect == "any" and code == 2 and len(lines) == 1:
        return "written" if new else "clear"
    return "ok" if code == 0 and not _warned(lines) else "unclear"


def _warned(lines: list[str]) -> bool:
    """A library's warning reached the user as a line of its own."""
    return any("warning:" in line.lower() for line in lines)


def run_case(case: Case, workspace: Path) -> tuple[str, str]:
    """(outcome, stderr) of one case in its own ``workspace`` (a copy of the pristine one)."""
    if case.setup:
        case.setup(workspace)
    argv = case.argv(workspace)
    before = snapshot(workspace)
    here = os.getcwd()
    os.chdir(workspace)  # what a tool writes where it runs is in the workspace, and counted
    try:
        code, err = call(tool_main(case.tool), argv)
    finally:
        os.chdir(here)
    after = snapshot(workspace)
    index_ok = all(strict_index(p) for p in workspace.rglob("index.jsonl"))
    return classify(case, code, err, before, after, index_ok), err


# ------------------------------------------------------------------------------ class 1: reads
def _yaml(value) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str) and value and all(c.isalnum() or c in "_-." for c in value):
        return value
    return None


# baselines on which the rows' conditions are judged: each turns some conditions on or off
READ_BASELINES: tuple[tuple[str, ...], ...] = (
    (), ("offload=host", "allocator=paged_prefix"), ("offload=host_disk", "allocator=paged_prefix"), ("engine.policy=sjf",), ("gpu.count=2",),
    ("workload=synthetic", "workload.distribution=uniform"), ("workload=synthetic", "workload.distribution=lognormal"),
    ("allocator=hybrid", "model=jamba-1.5-mini", "gpu=h200", "gpu.count=2"), ("engine.preemption=swap",),
    ("engine.policy=priority", "+workload.priority_shares=[0.2,0.8]"),
    ("allocator=paged_prefix",), ("workload=shared_prefix",), ("gpu=h200", "gpu.count=4"),
)
# values tried for a key whose default is null (a non-null value of its kind)
NULL_VALUES = {"offload.host_bytes": "1000000000", "offload.host_gpu_multiple": "2", "offload.disk_bytes": "1000000000",
               "engine.sjf_error": "0.2", "allocator.eviction": "lru", "offload.policy": "lru"}


def _compose(overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _read(cfg, key: str) -> bool | None:
    """Whether the run reads ``key`` under ``cfg`` (every row covering it holds); None: not decidable."""
    from kvbench.config.reads import READS

    try:
        return all(r.when(cfg) for r in READS if r.covers(key) and r.when is not None)
    except Exception:  # noqa: BLE001 - a condition needing what this baseline lacks
        return None


def reads_cases() -> list[Case]:
    from omegaconf import DictConfig, OmegaConf

    from kvbench.config.reads import READS

    cases, seen, first = [], set(), {}  # first: each key's read state on the first baseline
    conditional = sorted({r.key for r in READS if r.when is not None})
    for base in READ_BASELINES:
        cfg = _compose(base)
        for key in conditional:
            value = OmegaConf.select(cfg, key, default=None)
            if isinstance(value, DictConfig):
                continue
            text = _yaml(value) if value is not None else NULL_VALUES.get(key)
            read = _read(cfg, key)
            first.setdefault(key, read) if not base else None
            # past the first baseline, only the keys it turns on or off: the conditions' edges
            if text is None or read is None or (key, read, base[:1]) in seen or (base and first.get(key) == read):
                continue
            seen.add((key, read, base[:1]))
            args = [*base, f"{key}={text}"]
            expect = "ok" if read else "refuse"
            name = f"reads:{'read' if read else 'unread'}:{key}={text}@{','.join(base) or 'default'}"
            cases.append(Case(name, "reads", "kvbench", _with_results(args), expect))
            if not read and len([c for c in cases if c.tool == "kvbench-capacity"]) < 12:
                cases.append(Case(name.replace("reads:", "reads:capacity:"), "reads", "kvbench-capacity",
                                  _capacity_args(args), "refuse"))
    return cases


def _with_results(args: list[str]) -> Callable[[Path], list[str]]:
    return lambda ws: [*args, f"results_dir={ws / 'results'}"]


def _capacity_args(args: list[str], *options: str) -> Callable[[Path], list[str]]:
    return lambda ws: [*TINY, *args, f"results_dir={ws / 'results'}", "--slo", "p99_ttft_ms=1000000",
                       "--low", "1", "--high", "1", *options]


# ------------------------------------------------------------------------------ class 2: grammar
BAD_NUMBERS = ("inf", "nan", "-1", "0", "1e400", "abc", "-inf")
SPEC = ["--peak-flops", "989e12", "--mem-bandwidth", "3.35e12", "--memory-bytes", "8.5899e10",
        "--host-bandwidth", "64e9"]


def _replace(args: list[str], flag: str, value: str | None, twice: bool = False) -> list[str]:
    """``args`` with ``flag``'s value set to ``value`` (appended when absent); given twice if asked."""
    out = list(args)
    if flag in out and value is not None:
        out[out.index(flag) + 1] = value
    elif value is not None:
        out += [flag, value]
    if twice:
        i = out.index(flag)
        out += [flag, out[i + 1]]
    return out


def _capacity_base(ws: Path) -> list[str]:
    return [*TINY, f"results_dir={ws / 'results'}", "--slo", "p99_ttft_ms=1000000", "--low", "1", "--high", "1"]


def _validate_base(ws: Path) -> list[str]:
    return ["--fit-ops", str(ws / "tables"), "--out", str(ws / "out" / "g1.yaml"), "--name=g1", *SPEC]


def grammar_cases() -> list[Case]:
    cases: list[Case] = []
    capacity_options = {"--low": "1", "--high": "1", "--growth": "2", "--tolerance": "0.1"}
    for flag in capacity_options:
        for bad in BAD_NUMBERS:
            if flag == "--low" and bad in ("0",):
                pass
            cases.append(Case(f"grammar:capacity {flag} {bad}", "grammar", "kvbench-capacity",
                              (lambda f, b: lambda ws: _replace(_capacity_base(ws), f, b))(flag, bad), "refuse"))
        cases.append(Case(f"grammar:capacity {flag} twice", "grammar", "kvbench-capacity",
                          (lambda f, v: lambda ws: _replace(_replace(_capacity_base(ws), f, v), f, None, True))(
                              flag, capacity_options[flag]), "refuse"))
    for bad in ("inf", "nan", "-1", "abc", "1e400", "-inf"):  # the SLO's bound and the run seeds
        cases.append(Case(f"grammar:capacity --slo p99_ttft_ms={bad}", "grammar", "kvbench-capacity",
                          (lambda b: lambda ws: _replace(_capacity_base(ws), "--slo", f"p99_ttft_ms={b}"))(bad),
                          "refuse"))
        cases.append(Case(f"grammar:capacity --seeds 0,{bad}", "grammar", "kvbench-capacity",
                          (lambda b: lambda ws: _replace(_capacity_base(ws), "--seeds", f"0,{b}"))(bad), "refuse"))
    cases.append(Case("grammar:capacity --slo given twice", "grammar", "kvbench-capacity",
                      lambda ws: [*_capacity_base(ws), "--slo", "p99_ttft_ms=5"], "refuse"))
    cases.append(Case("grammar:capacity a bound twice in one --slo", "grammar", "kvbench-capacity",
                      lambda ws: _replace(_capacity_base(ws), "--slo", "p99_ttft_ms=5,p99_ttft_ms=6"), "refuse"))
    for flag in ("--low", "--high"):
        for bad in ("0", "-1", "1.5", "inf", "nan"):
            cases.append(Case(f"grammar:capacity max_concurrency {flag} {bad}", "grammar", "kvbench-capacity",
                              (lambda f, b: lambda ws: _replace([*_capacity_base(ws), "--knob", "max_concurrency"], f, b))(
                                  flag, bad), "refuse"))
    cases.append(Case("grammar:capacity --low above --high", "grammar", "kvbench-capacity",
                      lambda ws: _replace(_replace(_capacity_base(ws), "--low", "4"), "--high", "2"), "refuse"))
    cases.append(Case("grammar:capacity --growth 1", "grammar", "kvbench-capacity",
                      lambda ws: _replace(_capacity_base(ws), "--growth", "1"), "refuse"))
    cases.append(Case("grammar:capacity overrides on both sides", "grammar", "kvbench-capacity",
                      lambda ws: ["allocator=paged", "--slo", "p99_ttft_ms=1000000", *TINY[1:],
                                  f"results_dir={ws / 'results'}", "--low", "1", "engine.max_num_seqs=8",
                                  "--high", "1"], "ok"))
    cases.append(Case("grammar:capacity count with duration", "grammar", "kvbench-capacity",
                      _capacity_args(["workload.duration_s=10"]), "refuse"))
    spec_flags = [*SPEC[::2], "--interconnect-bandwidth", "--peak-flops-fp32"]
    for flag in spec_flags:
        for bad in BAD_NUMBERS:
            cases.append(Case(f"grammar:validate {flag} {bad}", "grammar", "kvbench-validate",
                              (lambda f, b: lambda ws: _replace(_validate_base(ws), f, b))(flag, bad), "refuse",
                              setup=_tables))
        cases.append(Case(f"grammar:validate {flag} twice", "grammar", "kvbench-validate",
                          (lambda f: lambda ws: _replace(_replace(_validate_base(ws), f, "1e12"), f, None, True))(flag),
                          "refuse", setup=_tables))
    cases.append(Case("grammar:validate --out without --fit-ops", "grammar", "kvbench-validate",
                      lambda ws: ["--out", str(ws / "out" / "g.yaml")], "refuse"))
    for key, value in (("engine.max_num_seqs", "8"), ("engine.max_num_batched_tokens", "4096"), ("seed", "3"),
                       ("engine.chunked_prefill", "true"), ("workload.num_requests", "9")):
        cases.append(Case(f"grammar:kvbench ++{key}={value}", "grammar", "kvbench",
                          _with_results([f"++{key}={value}"]), "ok"))
    for bad in ("nan", "inf", "-1", "abc"):
        for key in ("engine.max_num_seqs", "engine.max_num_batched_tokens", "workload.num_requests"):
            cases.append(Case(f"grammar:kvbench {key}={bad}", "grammar", "kvbench", _with_results([f"{key}={bad}"]),
                              "refuse"))
    return cases


# ------------------------------------------------------------------------------ class 3: writer
def _tables(ws: Path) -> None:
    """The workspace's operator tables (a copy is made by the pristine fixture; nothing to add)."""


def _results_args(ws: Path, out: Path, force: bool) -> list[str]:
    return ["--index", str(ws / "results" / "index.jsonl"), "--export", "csv", "--output", str(out),
            *(["--force"] if force else [])]


def _report_args(ws: Path, out: Path, force: bool) -> list[str]:
    return [str(ws / "results"), "--out", str(out), *(["--force"] if force else [])]


def _plot_args(ws: Path, out: Path, force: bool) -> list[str]:
    return [str(ws / "results"), "--x", "request_rate", "--y", "mean_ttft_ms", "--out", str(out),
            *(["--force"] if force else [])]


def _validate_args(ws: Path, out: Path, force: bool) -> list[str]:
    return ["--fit-ops", str(ws / "tables"), "--out", str(out), f"--name={out.stem}", *SPEC,
            *(["--force"] if force else [])]


WRITERS = {  # tool: (arguments, file name, the files that name writes)
    "kvbench-results": (_results_args, "sel.csv", lambda p: [p]),
    "kvbench-report": (_report_args, "rep.html", lambda p: [p]),
    "kvbench-plot": (_plot_args, "fig", lambda p: [p.with_name(p.name + ".png"), p.with_name(p.name + ".svg")]),
    "kvbench-validate": (_validate_args, "g2.yaml", lambda p: [p]),
}


def _run_folder(ws: Path) -> Path:
    return next((ws / "results" / "runs").glob("*/*/*/summary.json")).parent


def _target(kind: str, tool: str) -> Callable[[Path], tuple[Path, bool]]:
    """The path ``tool`` is given for a target of ``kind`` (made in the workspace), and --force."""
    _, name, files = WRITERS[tool]

    def make(ws: Path) -> tuple[Path, bool]:
        out = ws / "out" / name
        out.parent.mkdir(exist_ok=True)
        first = files(out)[0]
        if kind == "new":
            return out, False
        if kind in ("existing", "existing --force"):
            for path in files(out):
                path.write_text("old\n")
            return out, kind.endswith("--force")
        if kind == "the index":
            return ws / "results" / "index.jsonl", True
        if kind == "a run's summary":
            return _run_folder(ws) / "summary.json", True
        if kind == "inside a run folder":
            return _run_folder(ws) / name, True
        if kind == "inside the runs folder":
            return ws / "results" / "runs" / name, True
        if kind in ("a link to a file", "a link to the index"):
            real = ws / "results" / "index.jsonl" if kind.endswith("index") else ws / "out" / "real"
            if not real.exists():
                real.write_text("real\n")
            first.symlink_to(real)
            return out, True
        if kind == "a link to a folder":
            (ws / "out" / "dir").mkdir()
            first.symlink_to(ws / "out" / "dir")
            return out, True
        if kind == "a dangling link":
            first.symlink_to(ws / "out" / "nowhere")
            return out, True
        if kind == "a directory":
            out.mkdir()
            if first != out:
                first.mkdir()
            return out, True
        if kind == "a missing folder":
            return ws / "out" / "nope" / name, True
        if kind == "a file as folder":
            (ws / "out" / "afile").write_text("x\n")
            return ws / "out" / "afile" / name, True
        raise AssertionError(kind)
    return make


TARGETS = ("new", "existing", "existing --force", "the index", "a run's summary", "inside a run folder",
           "inside the runs folder", "a link to a file", "a link to the index", "a link to a folder",
           "a dangling link", "a directory", "a missing folder", "a file as folder")
WRITES = ("new", "existing --force")


def writer_cases() -> list[Case]:
    cases = []
    for tool, (arguments, _, _) in WRITERS.items():
        for kind in TARGETS:
            target = _target(kind, tool)
            state: dict = {}

            def setup(ws: Path, target=target, state=state) -> None:
                state["out"] = target(ws)

            def argv(ws: Path, arguments=arguments, state=state) -> list[str]:
                out, force = state.pop("out")
                return arguments(ws, out, force)
            # kvbench-plot given the index's name writes index.jsonl.png/.svg beside it, not the index
            due = kind in WRITES or (tool == "kvbench-plot" and kind == "the index")
            cases.append(Case(f"writer:{tool} onto {kind}", "writer", tool, argv, "ok" if due else "refuse",
                              setup=setup, replaces="out" if due else ""))
    for kind, expect in (("a new folder", "ok"), ("a file", "refuse"), ("a link to a file", "refuse"),
                         ("a dangling link", "refuse"), ("the index", "refuse"), ("inside a run folder", "refuse"),
                         ("a run's summary", "refuse")):
        def where(ws: Path, kind=kind) -> Path:
            return {"a new folder": ws / "new", "a file": ws / "out" / "file", "a link to a file": ws / "out" / "link",
                    "a dangling link": ws / "out" / "dangling", "the index": ws / "results" / "index.jsonl",
                    "inside a run folder": _run_folder(ws) / "res",
                    "a run's summary": _run_folder(ws) / "summary.json"}[kind]

        def setup(ws: Path, kind=kind, where=where) -> None:
            (ws / "out").mkdir(exist_ok=True)
            if kind == "a file":
                where(ws).write_text("mine\n")
            if kind == "a link to a file":
                (ws / "out" / "real").write_text("real\n")
                where(ws).symlink_to(ws / "out" / "real")
            if kind == "a dangling link":
                where(ws).symlink_to(ws / "out" / "nowhere")
        cases.append(Case(f"writer:kvbench-capacity results_dir onto {kind}", "writer", "kvbench-capacity",
                          (lambda where: lambda ws: [*TINY, f"results_dir={where(ws)}", "--slo", "p99_ttft_ms=1000000",
                                                     "--low", "1", "--high", "1"])(where), expect, setup=setup))
    return cases


# ------------------------------------------------------------------------------ class 4: tables
TABLE_VALUES = ("", "nan", "inf", "-1", "abc")


def _edit_table(column: str | None, value: str, row: int = 3, drop: bool = False,
                header_only: bool = False) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        import csv

        path = ws / "tables" / "m" / "mlp.csv"
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
            columns = list(rows[0].keys())
        if column is not None and not drop:
            rows[row - 2][column] = value
        if drop:
            columns.remove(column)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            writer.writeheader()
            if not header_only:
                writer.writerows(rows)
    return setup


def _second_table(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        import shutil

        shutil.copytree(ws / "tables" / "m", ws / "tables" / "good")
        edit(ws)
    return setup


def _linked_tables(ws: Path) -> None:
    (ws / "tables" / "m").rename(ws / "real_tables")
    (ws / "tables" / "m").symlink_to(ws / "real_tables", target_is_directory=True)


def tables_cases() -> list[Case]:
    from tests.test_validate_tables import COLUMNS

    cases = []
    for column in COLUMNS:
        for value in TABLE_VALUES:
            if column == "use_gated_mlp" and value in ("-1",):
                pass
            cases.append(Case(f"tables:{column}={value!r}", "tables", "kvbench-validate", _validate_base, "refuse",
                              setup=_edit_table(column, value)))
    for column in ("num_tensor_parallel_workers", "n_head", "num_tokens", "n_embd"):
        cases.append(Case(f"tables:{column}=0", "tables", "kvbench-validate", _validate_base, "refuse",
                          setup=_edit_table(column, "0")))
    for column in COLUMNS[:4] + COLUMNS[-2:]:
        cases.append(Case(f"tables:no column {column}", "tables", "kvbench-validate", _validate_base, "refuse",
                          setup=_edit_table(column, "", drop=True)))
    cases.append(Case("tables:header only", "tables", "kvbench-validate", _validate_base, "refuse",
                      setup=_edit_table(None, "", header_only=True)))

    def empty_file(ws: Path) -> None:
        (ws / "tables" / "m" / "mlp.csv").write_text("")

    def binary(ws: Path) -> None:
        (ws / "tables" / "m" / "mlp.csv").write_bytes(b"\x00\xff\xfe" * 50)

    def no_tables(ws: Path) -> None:
        (ws / "tables" / "m" / "mlp.csv").unlink()
    for name, setup in (("empty file", empty_file), ("binary file", binary), ("no tables", no_tables)):
        cases.append(Case(f"tables:{name}", "tables", "kvbench-validate", _validate_base, "refuse", setup=setup))
    for column in ("n_head", "time_stats.add.median"):  # one bad table of two: the other is fitted, the bad one named
        cases.append(Case(f"tables:one bad of two ({column})", "tables", "kvbench-validate", _validate_base, "word",
                          setup=_second_table(_edit_table(column, "nan")), word="row 3"))
    cases.append(Case("tables:a link to a folder of tables", "tables", "kvbench-validate", _validate_base, "ok",
                      setup=_linked_tables))
    for name in ("a: b", "x\ny", "#c", "'q'", "{}", "[1]", "- z", "a=b", "*x", "&y", "!t"):
        cases.append(Case(f"tables:--name {name!r}", "tables", "kvbench-validate",
                          (lambda n: lambda ws: ["--fit-ops", str(ws / "tables"), "--out", str(ws / "out" / f"{n}.yaml"),
                                                 f"--name={n}", *SPEC])(name), "any"))
    return cases


# ------------------------------------------------------------------------------ class 5: dropped
def _drop(third: dict) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        from kvbench.results.store import write_run
        import pandas as pd

        root = ws / "dropped"
        steps = pd.DataFrame({"time_s": [0.0, 1.0], "mem_token_frac": [0.2, 0.4]})
        for i, rate in enumerate((1.0, 2.0, 4.0)):
            row = {"run_id": f"r{i}", "experiment": "d", "workload": "sharegpt", "model": "opt-13b",
                   "gpu_profile": "a100-40gb", "allocator": "paged", "allocator_label": "paged", "block_size": 16,
                   "commit": "abc", "seed": 0, "request_rate": rate, "request_throughput": rate,
                   "p99_ttft_ms": 100.0 / rate, "mean_ttft_ms": 50.0 / rate}
            if i == 2:
                row = {k: v for k, v in {**row, **third}.items() if v is not _ABSENT}
            write_run(root / "runs" / "d" / f"r{i}", row, steps, pd.DataFrame(), root / "index.jsonl")
    return setup


_ABSENT = object()
# the reasons a selected run is left out; kvbench-results --compare averages an inf (a value), so
# for it "y inf" is a run used, and the only line due is none
DROPS = {"x inf": {"request_rate": math.inf}, "x null": {"request_rate": None}, "x absent": {"request_rate": _ABSENT},
         "y null": {"p99_ttft_ms": None}, "y absent": {"p99_ttft_ms": _ABSENT}, "y inf": {"p99_ttft_ms": math.inf},
         "y nan": {"p99_ttft_ms": math.nan}, "y negative (log)": {"p99_ttft_ms": -5.0}}


def dropped_cases() -> list[Case]:
    cases = []
    for reason, third in DROPS.items():
        log = ["--logy"] if "log" in reason else []
        cases.append(Case(f"dropped:plot {reason}", "dropped", "kvbench-plot",
                          (lambda log: lambda ws: [str(ws / "dropped"), "--x", "request_rate", "--y", "p99_ttft_ms",
                                                   *log, "--out", str(ws / "dropped" / "fig")])(log),
                          "word", setup=_drop(third), word="not drawn"))
        if "log" in reason:
            continue  # only the plot has a log axis
        cases.append(Case(f"dropped:report {reason}", "dropped", "kvbench-report",
                          lambda ws: [str(ws / "dropped"), "--out", str(ws / "dropped" / "r.html"), "--x",
                                      "request_rate", "--metrics", "p99_ttft_ms"],
                          "word", setup=_drop(third), word="not "))
        if reason.startswith("y"):
            cases.append(Case(f"dropped:results --compare {reason}", "dropped", "kvbench-results",
                              lambda ws: ["--index", str(ws / "dropped" / "index.jsonl"), "--compare", "allocator_label",
                                          "--baseline", "paged", "--metrics", "p99_ttft_ms"],
                              "ok" if reason == "y inf" else "word", setup=_drop(third), word="not used"))
    cases.append(Case("dropped:report --metrics workload", "dropped", "kvbench-report",
                      lambda ws: [str(ws / "dropped"), "--out", str(ws / "dropped" / "r.html"), "--metrics", "workload"],
                      "refuse", setup=_drop({})))
    return cases


def cases() -> list[Case]:
    return [*reads_cases(), *grammar_cases(), *writer_cases(), *tables_cases(), *dropped_cases()]
