"""Every tool's user-named output goes through the one writer (``kvbench.results.outputs``): each of
``kvbench-results --output``, ``kvbench-plot --out``, ``kvbench-report --out``, ``kvbench-validate
--fit-ops --out`` and ``kvbench-capacity`` (its ``results_dir``) driven onto each kind of target.

A refusal: exit 2, one line on stderr, no traceback, the whole tree unchanged (bytes and links), the
results index still strict JSONL. A write: exit 0, only the named file(s) changed.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import tests.test_validate_tables as tables_helpers

SWEEP = ["allocator=paged", "workload.num_requests=4", "workload.prompt_len=32", "workload.output_len=32",
         "engine.kv_cache_bytes=4000000000", "progress=false"]


def _sim_runs(results: Path, rates=(2, 8)) -> Path:
    """Tiny simulated runs in one sweep dir, run in-process as Hydra would run its jobs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from kvbench.config.errors import CONF_DIR
    from kvbench.run.ids import new_run_id
    from kvbench.run.lifecycle import run

    sweep = results / "runs" / "adhoc" / new_run_id()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for rate in rates:
            cfg = compose(config_name="config", overrides=[*SWEEP, f"workload.request_rate={rate}",
                                                           f"results_dir={results}"], return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            try:
                run_id = new_run_id()
                run(cfg, run_dir=sweep / run_id, run_id=run_id)
            finally:
                HydraConfig.instance().cfg = None
    return sweep


@pytest.fixture(autouse=True)
def no_stale_log_handlers():
    """An in-process Hydra app run by an earlier test leaves root handlers on that test's captured
    streams, since closed; a record reaching them prints "--- Logging error ---" into this test's
    stderr. A tool in its own process never has them."""
    root = logging.getLogger()
    stale = [h for h in root.handlers if getattr(getattr(h, "stream", None), "closed", False)]
    for handler in stale:
        root.removeHandler(handler)
    yield
    for handler in stale:
        root.addHandler(handler)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A results folder with two tiny sim runs, and a folder of operator tables for --fit-ops."""
    root = tmp_path_factory.mktemp("outputs")
    _sim_runs(root / "results")
    tables_helpers.write_table(root / "tables" / "m" / "mlp.csv", tables_helpers.shipped_rows())
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    shutil.copytree(pristine, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


# ------------------------------------------------------------------------------ what is on disk
def snapshot(top: Path) -> dict[str, tuple]:
    """Every path under ``top``: a link's target, a folder, or a file's bytes (links not followed)."""
    seen: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            key = str(path.relative_to(top))
            if path.is_symlink():
                seen[key] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[key] = ("dir",)
            elif path.is_file():
                seen[key] = ("file", path.read_bytes())
            else:
                seen[key] = ("other",)
    return seen


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def assert_strict_index(results: Path) -> None:
    def refuse(token: str):
        raise ValueError(f"not strict JSON: {token}")

    for line in (results / "index.jsonl").read_text().splitlines():
        assert isinstance(json.loads(line, parse_constant=refuse), dict)


def a_run_folder(root: Path) -> Path:
    return next((root / "results" / "runs").glob("*/*/*/summary.json")).parent


# ------------------------------------------------------------------------------ the four --out tools
def _results(root: Path, out: Path, force: bool) -> list[str]:
    return ["--index", str(root / "results" / "index.jsonl"), "--export", "json", "--output", str(out),
            *(["--force"] if force else [])]


def _report(root: Path, out: Path, force: bool) -> list[str]:
    return [str(root / "results"), "--out", str(out), *(["--force"] if force else [])]


def _plot(root: Path, out: Path, force: bool) -> list[str]:
    return [str(root / "results"), "--x", "request_rate", "--y", "request_throughput", "--out", str(out),
            *(["--force"] if force else [])]


def _validate(root: Path, out: Path, force: bool) -> list[str]:
    return ["--fit-ops", str(root / "tables"), "--out", str(out), f"--name={out.stem}", *tables_helpers.SPEC,
            *(["--force"] if force else [])]


def _main(tool: str) -> Callable[[list[str]], int]:
    if tool == "kvbench-results":
        from kvbench.results.cli import main
    elif tool == "kvbench-report":
        from kvbench.tools.report import main
    elif tool == "kvbench-plot":
        from kvbench.tools.plot import main
    else:
        from kvbench.sim.validate import main
    return main


# tool -> (its arguments, the file name it is given, the files that name makes it write)
TOOLS: dict[str, tuple[Callable, str, Callable[[Path], list[Path]]]] = {
    "kvbench-results": (_results, "sel.json", lambda p: [p]),
    "kvbench-report": (_report, "rep.html", lambda p: [p]),
    "kvbench-plot": (_plot, "fig", lambda p: [p.with_name(p.name + ".png"), p.with_name(p.name + ".svg")]),
    "kvbench-validate": (_validate, "g1.yaml", lambda p: [p]),
}


def _index_rows(root: Path) -> bytes:
    return (root / "results" / "index.jsonl").read_bytes()


def prepare(kind: str, root: Path, tool: str) -> tuple[Path, bool]:
    """Make the target of ``kind`` for ``tool``; the path to name and whether to pass --force."""
    _, name, files = TOOLS[tool]
    out = root / "out" / name
    out.parent.mkdir()
    first = files(out)[0]  # the file a check meets first
    if kind == "new":
        return out, False
    if kind in ("existing", "existing --force"):
        for path in files(out):
            path.write_text("old\n")
        return out, kind.endswith("--force")
    if kind == "the index --force":
        if tool == "kvbench-results" or tool == "kvbench-report":
            return root / "results" / "index.jsonl", True
        first.write_bytes(_index_rows(root))  # a file holding index rows, under the name the tool writes
        return out, True
    if kind == "inside a run folder":
        return a_run_folder(root) / name, True
    if kind == "a link to a file":
        (root / "out" / "real").write_text("real\n")
        first.symlink_to(root / "out" / "real")
        return out, True
    if kind == "a dangling link":
        first.symlink_to(root / "out" / "nowhere")
        return out, True
    if kind == "a directory":
        out.mkdir()
        if first != out:
            first.mkdir()
        return out, True
    if kind == "a missing folder":
        return root / "out" / "nope" / name, True
    raise AssertionError(kind)


KINDS = ["new", "existing", "existing --force", "the index --force", "inside a run folder", "a link to a file",
         "a dangling link", "a directory", "a missing folder"]
WRITES = {"new", "existing --force"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tool", list(TOOLS))
def test_each_tool_onto_each_target(tool, kind, root, capsys):
    arguments, _, files = TOOLS[tool]
    out, force = prepare(kind, root, tool)
    before = snapshot(root)
    code = _main(tool)(arguments(root, out, force))
    captured = capsys.readouterr()
    after = snapshot(root)
    assert "Traceback" not in captured.err
    assert_strict_index(root / "results")
    if kind in WRITES:
        assert code == 0, captured.err
        written = {str(p.relative_to(root)) for p in files(out)}
        assert changed(before, after) == written  # nothing else in the folder, no temporary left
        for path in files(out):
            assert path.is_file() and not path.is_symlink() and path.read_text(errors="replace") != "old\n"
        return
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"{tool}: "), captured.err
    assert changed(before, after) == set()  # the target kept: bytes and link-ness
    if kind == "the index --force":
        assert "index" in lines[0]


def test_a_failed_write_is_one_line_and_leaves_nothing(root, capsys, monkeypatch):
    from kvbench.results import outputs

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "replace", full)
    for tool, (arguments, name, _) in TOOLS.items():
        (root / tool).mkdir()
        before = snapshot(root)
        code = _main(tool)(arguments(root, root / tool / name, False))
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "No space left on device" in lines[0], (tool, err)
        assert changed(before, snapshot(root)) == set()


# ------------------------------------------------------------------------------ kvbench-capacity
def _capacity(results_dir: Path) -> list[str]:
    return [*SWEEP, f"results_dir={results_dir}", "--slo", "p99_ttft_ms=1000000", "--low", "1", "--high", "1"]


@pytest.mark.parametrize("kind", ["a new folder", "an existing results folder", "a file", "a link to a file",
                                  "a dangling link", "the index", "inside a run folder"])
def test_capacity_writes_only_its_own_folder(kind, root, capsys):
    from kvbench.tools.capacity import main

    results = root / "results"
    target = {"a new folder": root / "new", "an existing results folder": results, "a file": root / "file",
              "a link to a file": root / "link", "a dangling link": root / "dangling",
              "the index": results / "index.jsonl", "inside a run folder": a_run_folder(root) / "res"}[kind]
    if kind == "a file":
        target.write_text("mine\n")
    if kind == "a link to a file":
        (root / "real").write_text("real\n")
        target.symlink_to(root / "real")
    if kind == "a dangling link":
        target.symlink_to(root / "nowhere")
    before = snapshot(root)
    code = main(_capacity(target))
    captured = capsys.readouterr()
    after = snapshot(root)
    assert "Traceback" not in captured.err
    assert_strict_index(results)
    if kind in ("a new folder", "an existing results folder"):
        assert code == 0, captured.err
        new = changed(before, after)
        prefix = str(target.relative_to(root))
        assert all(k.startswith(prefix) for k in new)  # nothing outside the results folder
        capacity = [k for k in new if k.endswith("capacity.json")]
        assert len(capacity) == 1 and json.loads((root / capacity[0]).read_text())["answers"]
        assert_strict_index(target)
        return
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("kvbench-capacity: "), captured.err
    assert changed(before, after) == set()
