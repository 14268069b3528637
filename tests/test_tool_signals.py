"""Every command that runs work answers SIGINT with 130 and SIGTERM with 143, in one line, and
keeps what finished (``kvbench.cli.command``, ``kvbench.run.signals``).

Each tool runs as a real process. ``kvbench-capacity`` runs a long search and is signalled after
its first probe finished; the other tools' work is short, so a helper process runs the tool's
own ``main`` with its slow step replaced by a marker and a long sleep (the signal lands inside
the tool's work, as it would on a big index). A signal during start-up is one line too.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ["workload.distribution=uniform", "workload.prompt_min=16", "workload.prompt_max=64",
        "workload.output_min=16", "workload.output_max=64", "engine.kv_cache_bytes=500000000", "logger=none"]
SIGNALS = [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true")
    env.pop("TRITON_INTERPRET", None)
    return env


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait_line(proc: subprocess.Popen, marker: str, timeout: float = 60) -> list[str]:
    """Read stdout until a line holding ``marker``; the lines read."""
    lines, deadline = [], time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} in the output: {''.join(lines)}")


def _one_line(proc: subprocess.Popen, code: int, prog: str, word: str) -> str:
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: {word}"), err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, word", SIGNALS)
def test_capacity_keeps_the_finished_probes(tmp_path, sig, code, word):
    """Signalled during the second probe: the first probe's run dir and index row stay, the
    unfinished one is gone, and the exit is one line (SIGTERM used to kill it with -15, silently)."""
    results = tmp_path / "results"
    proc = _start(["-m", "kvbench.tools.capacity", f"results_dir={results}", "allocator=paged", *TINY,
                   "workload.num_requests=4000", "--slo", "p99_ttft_ms=1e9", "--low", "1", "--high", "64"], tmp_path)
    _wait_line(proc, "probe paged")
    time.sleep(0.5)
    proc.send_signal(sig)
    line = _one_line(proc, code, "kvbench-capacity", word)
    assert "finished probes are kept" in line
    runs = [p for p in results.glob("runs/*/*/*") if p.is_dir()]
    assert runs and all((r / "summary.json").is_file() for r in runs), runs
    rows = [json.loads(r) for r in (results / "index.jsonl").read_text().splitlines() if r.strip()]
    assert sorted(r["run_id"] for r in rows) == sorted(r.name for r in runs)


SLOW_STEP = """
import sys, time
import {module} as tool
def slow(*args, **kwargs):
    print("MARK", flush=True)
    time.sleep(60)
setattr({target}, "{name}", slow)
sys.exit(tool.main({argv!r}))
"""
TOOLS = {  # prog: (module, where its work is, the name replaced, argv)
    "kvbench-plot": ("kvbench.tools.plot", "tool", "load_runs", ["results", "--x", "a", "--y", "b", "--out", "fig"]),
    "kvbench-report": ("kvbench.tools.report", "tool", "build_html", ["results", "--out", "r.html"]),
    "kvbench-results": ("kvbench.results.cli", "tool", "load_index", ["--index", "index.jsonl"]),
    "kvbench-validate": ("kvbench.sim.validate", "tool", "fit_user_profile",
                         ["--fit-ops", "tables", "--out", "g.yaml", "--name", "g"]),
}


@pytest.mark.parametrize("prog", TOOLS)
@pytest.mark.parametrize("sig, code, word", SIGNALS)
def test_a_tool_signalled_in_its_work_is_one_line(tmp_path, prog, sig, code, word):
    module, target, name, argv = TOOLS[prog]
    (tmp_path / "index.jsonl").write_text("")
    (tmp_path / "tables").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = _start(["-c", SLOW_STEP.format(module=module, target=target, name=name, argv=argv)], tmp_path)
    _wait_line(proc, "MARK")
    proc.send_signal(sig)
    _one_line(proc, code, prog, word)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("module, prog", [("kvbench.tools.capacity", "kvbench-capacity"),
                                          ("kvbench.tools.plot", "kvbench-plot")])
def test_a_signal_during_start_up_is_one_line(tmp_path, module, prog):
    """From kvbench's first import on, a tool answers SIGTERM in one line with 143."""
    proc = _start(["-m", module, "--help"], tmp_path)
    while not _catches_sigterm(proc.pid) and proc.poll() is None:
        time.sleep(0.002)  # the interpreter's own start-up, before any kvbench code, is not ours
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    if proc.returncode == 0:  # it printed its help before the signal came: nothing to judge
        pytest.skip("the tool finished first")
    assert proc.returncode == 143 and len(lines) == 1 and lines[0].startswith(f"{prog}: "), err
    assert list(tmp_path.iterdir()) == []
