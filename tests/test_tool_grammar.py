"""One grammar for every command (``kvbench.cli``): overrides anywhere among the options, every
documented command line accepted, the same conflict rules in ``kvbench-capacity`` as in
``kvbench``, an option or bound given twice refused, every number parsed by one function (finite,
in range, its unit named), and no library warning as an extra line."""
from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from kvbench.cli import number, quiet_libraries
from kvbench.results import cli as results_cli
from kvbench.run.precheck import precheck
from kvbench.sim import validate
from kvbench.tools import capacity, plot, report
from kvbench.tools.capacity import CapacityError, search, search_bounds

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
TINY = ["workload.distribution=uniform", "workload.prompt_min=16", "workload.prompt_max=64",
        "workload.output_min=16", "workload.output_max=64", "engine.kv_cache_bytes=500000000", "logger=none",
        "workload.num_requests=20"]


def _files(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*")} if folder.exists() else set()


# -- overrides anywhere --------------------------------------------------------------------------
def test_capacity_reads_overrides_on_both_sides_of_an_option():
    args = capacity.parser().parse_args(["allocator=paged", "--slo", "p99_ttft_ms=5000", "workload.num_requests=20"])
    assert args.overrides == ["allocator=paged", "workload.num_requests=20"] and args.slo == "p99_ttft_ms=5000"


def test_capacity_runs_with_overrides_after_the_options(tmp_path, capsys):
    code = capacity.main(["allocator=paged", "--slo", "p99_ttft_ms=5000", f"results_dir={tmp_path}", "--low", "1",
                          *TINY, "--high", "1"])
    assert code == 0, capsys.readouterr().err
    [found] = list(tmp_path.glob("runs/*/*/capacity.json"))
    recorded = json.loads(found.read_text())
    assert "workload.num_requests=20" in recorded["overrides"] and recorded["low"] == 1.0


# -- every documented command line is accepted ---------------------------------------------------
def _readme_commands() -> list[str]:
    """Every ``kvbench...`` command line of README.md's code blocks (continuations joined, comments
    dropped) and every inline code span that is one."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if re.match(r"kvbench(-\w+)?( |$)", line):
                found.append(" ".join(line.split(" && ")[0].split()))
    lines = text.splitlines()
    for i, line in enumerate(lines):  # indented code, continued by a trailing backslash
        if line.startswith("    kvbench"):
            command = line
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i]
            found.append(" ".join(command.split(" #", 1)[0].split()))
    found += [" ".join(span.split(" #", 1)[0].split()) for span in re.findall(r"`(kvbench(?: [^`]+)?)`", text)]
    return list(dict.fromkeys(found))


# refusals that depend on the machine, not on the command line
ENVIRONMENT = ("needs SLURM", "the Ray launcher is the ray extra")


def _user_configs(home: Path) -> None:
    """The folders README.md's "Your own configs" section and the GPU fit make."""
    kvb = home / "kvb"
    for folder in ("gpu", "experiment", "primary"):
        (kvb / folder).mkdir(parents=True)
    gpu = yaml.safe_load((CONF / "gpu" / "h100-80gb.yaml").read_text())
    (kvb / "gpu" / "my-h100.yaml").write_text(yaml.safe_dump({**gpu, "name": "my-h100"}))
    (kvb / "experiment" / "mine.yaml").write_text("# @package _global_\nworkload:\n  num_requests: 20\n")
    (kvb / "myconfig.yaml").write_text("defaults:\n  - config\n  - _self_\n")
    (kvb / "primary" / "myprimary.yaml").write_text(
        f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n    - file://{CONF}\n")
    (home / "conf-dir" / "gpu").mkdir(parents=True)
    (home / "conf-dir" / "gpu" / "my-gpu.yaml").write_text(yaml.safe_dump({**gpu, "name": "my-gpu"}))


def _argv(line: str, home: Path) -> list[str]:
    line = line.replace("~", str(home)).replace("$HOME", str(home))
    return [word if not word.startswith("conf-dir") else str(home / word) for word in shlex.split(line)[1:]]


SLOW_LINES = ("backend=hf",)  # transformers' import: the slow tier


def _cases() -> list:
    return [pytest.param(line, id=line[:90], marks=[pytest.mark.slow] if any(s in line for s in SLOW_LINES) else [])
            for line in _readme_commands()]


def test_the_readme_holds_commands_of_every_tool():
    tools = {line.split()[0] for line in _readme_commands()}
    assert {"kvbench", "kvbench-capacity", "kvbench-plot", "kvbench-report", "kvbench-results",
            "kvbench-validate"} <= tools, tools
    assert "kvbench engine.policy=priority +workload.priority_shares=[0.2,0.8]" in _readme_commands()


@pytest.mark.parametrize("line", _cases())
def test_every_readme_command_is_accepted(line, tmp_path, monkeypatch):
    """Composed and checked, never run: ``kvbench``'s pre-check, ``kvbench-capacity``'s pre-check of
    each search, the other tools' parsers."""
    home = tmp_path / "home"
    _user_configs(home)
    monkeypatch.chdir(tmp_path)
    tool, argv = line.split()[0], _argv(line, home)
    if "$SWEEP" in line or "$(" in line:
        argv = [w if "$" not in w else str(tmp_path) for w in argv]
    if tool == "kvbench":
        error = precheck(argv)
        if error and any(e in error for e in ENVIRONMENT):
            pytest.skip(error)
        assert error is None, error
    elif tool == "kvbench-capacity":
        args = capacity.parser().parse_args(argv)
        allocators, rest = capacity.split_allocators(args.overrides, args.knob, bool(args.seeds))
        bounds = search_bounds(args.knob, args.low or 0.5, args.high, args.tolerance, args.growth)
        prober = capacity.HydraProber(rest, args.knob, capacity.SLO({}), print)
        capacity.precheck_probes(prober, allocators, bounds.low, capacity.parse_seeds(args.seeds) or [None])
    elif tool in ("kvbench-plot", "kvbench-report"):
        (plot if tool == "kvbench-plot" else report).parser().parse_args(argv)
    elif tool == "kvbench-results":
        _parses_results(argv, monkeypatch)
    elif tool == "kvbench-validate":
        assert validate.idle_option(_validate_args(argv)) is None
    else:
        pytest.skip(f"{tool}: no work to check")


class _Parsed(Exception):
    """The command line parsed and its modes agreed: what a README line must reach."""


def _parses_results(argv: list[str], monkeypatch) -> None:
    real = results_cli.check_modes

    def checked(args) -> None:
        real(args)
        raise _Parsed

    monkeypatch.setattr(results_cli, "check_modes", checked)
    with pytest.raises(_Parsed):
        results_cli.main(argv)


def _validate_args(argv: list[str]):
    captured = {}

    def grab(args):
        captured["args"] = args
        return 0

    real = validate.fit_user_profile
    validate.fit_user_profile = grab
    try:
        validate.main(argv)
    finally:
        validate.fit_user_profile = real
    return captured["args"]


def test_the_priority_example_of_the_readme_is_accepted_and_a_bad_share_is_not():
    assert precheck(["engine.policy=priority", "+workload.priority_shares=[0.2,0.8]"]) is None
    error = precheck(["engine.policy=priority", "+workload.priority_shares=[0.2,abc]"])
    assert error == "workload.priority_shares item must be a number; got 'abc'"


# -- kvbench-capacity applies kvbench's rules ------------------------------------------------------
CONFLICTS = [
    ["workload.num_requests=20", "workload.duration_s=10"],
    ["engine.swap_space_bytes=1e9", "engine.preemption=recompute"],
    ["engine.clock=wall"],
    ["engine.sjf_error=0.5"],
    ["engine.max_num_seqs=abc"],
    ["model.load=dummy"],
    ["offload.store_order=tail_first"],
    ["+workload.nonsense=1"],
]


@pytest.mark.parametrize("overrides", CONFLICTS, ids=lambda o: " ".join(o))
def test_capacity_refuses_what_kvbench_refuses_in_the_same_line(overrides, tmp_path, capsys):
    expected = precheck([f"results_dir={tmp_path}", *overrides, "workload.request_rate=0.5"])  # the first probe
    assert expected
    code = capacity.main([f"results_dir={tmp_path}", "--slo", "p99_ttft_ms=100", *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"kvbench-capacity: error: {expected}"
    assert _files(tmp_path) == set()


# -- an option or a bound given twice ---------------------------------------------------------------
@pytest.mark.parametrize("main, argv, message", [
    (capacity.main, ["--slo", "p99_ttft_ms=1", "--high", "8", "--high", "16"], "--high given twice (--high 8, then --high 16)"),
    (capacity.main, ["--slo", "p99_ttft_ms=1", "--slo", "p99_ttft_ms=2"], "--slo given twice"),
    (capacity.main, ["--slo", "p99_ttft_ms=1,p99_ttft_ms=2"], "--slo: p99_ttft_ms given twice"),
    (capacity.main, ["--slo", "p99_ttft_ms=1", "--knob", "request_rate", "--knob", "max_concurrency"], "--knob given twice"),
    (plot.main, ["results", "--x", "a", "--y", "b", "--out", "f", "--out", "g"], "--out given twice"),
    (report.main, ["results", "--baseline", "a", "--baseline", "b"], "--baseline given twice"),
    (results_cli.main, ["--format", "csv", "--format", "table"], "--format given twice"),
    (validate.main, ["--fit-ops", "d", "--peak-flops", "1e12", "--peak-flops", "2e12"],
     "--peak-flops given twice (--peak-flops 1e+12, then --peak-flops 2e+12)"),
])
def test_an_option_given_twice_is_refused(main, argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert _files(tmp_path) == set()


def test_a_repeatable_option_still_repeats():
    args = plot.parser().parse_args(["results", "--x", "a", "--y", "b", "--where", "a=1", "--where", "b=2"])
    assert args.where == ["a=1", "b=2"]


# -- one parser of numbers ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, bounds, expected", [
    ("2.5", {"above": 0}, 2.5), ("1e3", {"at_least": 1, "integer": True}, 1000), ("inf", {"infinite": True}, math.inf),
    (" 7 ", {"at_most": 7}, 7.0),
])
def test_number_reads_what_is_in_range(text, bounds, expected):
    assert number(text, "s", **bounds) == expected


@pytest.mark.parametrize("text, bounds, message", [
    ("inf", {"above": 0}, "must be a finite number > 0, in s; got 'inf'"),
    ("nan", {"infinite": True}, "must be a number other than nan, in s; got 'nan'"),
    ("-inf", {}, "must be a finite number, in s; got '-inf'"),
    ("0", {"above": 0}, "must be a finite number > 0, in s; got '0'"),
    ("2.5", {"at_least": 1, "integer": True}, "must be a whole number >= 1, in s; got '2.5'"),
    ("abc", {}, "must be a finite number, in s; got 'abc'"),
    ("1.5", {"above": 0, "at_most": 1}, "must be a finite number > 0 and <= 1, in s; got '1.5'"),
])
def test_number_refuses_in_one_line_naming_the_unit(text, bounds, message):
    with pytest.raises(ValueError) as exc:
        number(text, "s", **bounds)
    assert str(exc.value) == message


@pytest.mark.parametrize("argv, message", [
    (["--high", "inf"], "--high: must be a finite number > 0, in req/s; got 'inf'"),
    (["--low", "nan"], "--low: must be a finite number > 0, in req/s; got 'nan'"),
    (["--low", "-1"], "--low: must be a finite number > 0, in req/s; got '-1'"),
    (["--growth", "1"], "--growth: must be a finite number > 1"),
    (["--tolerance", "0"], "--tolerance: must be a finite number > 0, in req/s"),
    (["--tolerance", "1e-30"], "up to 113 probes per search, more than 50"),
    (["--high", "1e300"], "probes per search, more than 50"),
    (["--low", "8", "--high", "4"], "--high 4 is below --low 8 (req/s)"),
    (["--knob", "max_concurrency", "--low", "2.5"], "--low: must be a whole number >= 1, in requests in flight"),
    (["--knob", "max_concurrency", "--high", "inf"], "--high: must be a whole number >= 1, in requests in flight"),
    (["--seeds", "0,1.5"], "each seed must be a whole number >= 0"),
    (["--seeds", "0,0"], "--seeds: distinct whole numbers"),
])
def test_capacity_numbers_are_one_line_with_their_unit(argv, message, tmp_path, capsys):
    code = capacity.main([f"results_dir={tmp_path}", "--slo", "p99_ttft_ms=100", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert _files(tmp_path) == set()


@pytest.mark.parametrize("slo, message", [
    ("p99_ttft_ms=inf", "--slo: p99_ttft_ms must be a finite number > 0, in ms; got 'inf'"),
    ("mean_e2e_s=nan", "--slo: mean_e2e_s must be a finite number > 0, in s; got 'nan'"),
    ("p99_tpot_ms=1e400", "--slo: p99_tpot_ms must be a finite number > 0, in ms; got '1e400'"),
])
def test_slo_bounds_are_parsed_by_the_same_function(slo, message, tmp_path, capsys):
    code = capacity.main([f"results_dir={tmp_path}", "--slo", slo])
    assert code == 2 and capsys.readouterr().err.strip() == f"kvbench-capacity: error: {message}"


def test_the_old_hang_high_inf_is_refused_before_any_probe():
    with pytest.raises(CapacityError, match="--high: must be a finite number"):
        search_bounds("request_rate", 0.5, "inf", None, 2)


def test_a_bisection_at_the_precision_of_a_float_ends():
    """A tolerance below what a float tells apart used to bisect for ever (the middle is an end)."""
    calls = []

    def probe(value: float) -> capacity.Probe:
        calls.append(value)
        assert len(calls) < 2000, "the bisection does not end"
        return capacity.Probe(value, value <= 1.0 + 1e-12, "")

    held, failed, probes = search(probe, 1.0, 4.0, 1e-300)
    assert held <= 1.0 + 1e-12 < failed and failed - held < 1e-15 and len(probes) < 200


@pytest.mark.parametrize("argv, message", [
    (["--fit-ops", "d", "--peak-flops", "inf"], "argument --peak-flops: must be a finite number > 0, in FLOP/s; got 'inf'"),
    (["--fit-ops", "d", "--memory-bytes", "-1"], "argument --memory-bytes: must be a finite number > 0, in bytes"),
    (["--fit-ops", "d", "--mem-bandwidth", "nan"], "argument --mem-bandwidth: must be a finite number > 0, in bytes/s"),
])
def test_validate_numbers_name_their_unit(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        validate.main(argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith(f"kvbench-validate: error: {message}") and "\n" not in err


def _index(tmp_path: Path) -> Path:
    index = tmp_path / "index.jsonl"
    rows = [{"run_id": f"r{i}", "experiment": "x", "allocator": "paged", "request_rate": rate, "p99_ttft_ms": 5.0}
            for i, rate in enumerate((1.0, 2.0))]
    index.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return index


@pytest.mark.parametrize("where, message", [
    ("request_rate>=nan", "--where: request_rate must be a number other than nan, in req/s; got 'nan'"),
    ("p99_ttft_ms<abc", "--where: p99_ttft_ms must be a number other than nan, in ms; got 'abc'"),
])
def test_where_numbers_are_parsed_by_the_same_function(where, message, tmp_path, capsys):
    index = _index(tmp_path)
    assert results_cli.main(["--index", str(index), "--where", where]) == 2
    assert capsys.readouterr().err.strip() == f"kvbench-results: {message}"


# -- library warnings ------------------------------------------------------------------------------------
def test_library_warnings_are_dropped_and_the_projects_are_one_line(capsys):
    library = str(Path(warnings.__file__))
    own = str(ROOT / "kvbench" / "results" / "store.py")
    with quiet_libraries("kvbench-x"):
        warnings.warn_explicit("provider=hydra.searchpath ... is not available.\n  warnings.warn(", UserWarning,
                               library, 1)
        warnings.warn_explicit("index.jsonl:3: skipping a line that is not a JSON object", UserWarning, own, 1)
    assert capsys.readouterr().err == "kvbench-x: warning: index.jsonl:3: skipping a line that is not a JSON object\n"


def test_kvbench_says_a_missing_search_path_folder_in_one_line(tmp_path):
    """Hydra warned in three lines with its install path before kvbench's own line."""
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", f"hydra.searchpath=[file://{tmp_path}/none]",
                           "gpu=my-h100", f"results_dir={tmp_path}/results"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Could not find 'gpu/my-h100'" in lines[0], proc.stderr
