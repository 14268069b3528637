"""``hydra/launcher=ray`` (the Hydra Ray launcher): on a local Ray cluster the sweep starts, and on a
two-node cluster started here (``init.address=auto``); the jobs run in Ray worker processes, and
their results, the index and the end-of-sweep table are right.

The Ray extra is not in the dev extras (it pins cloudpickle < 3, which joblib 1.6 refuses), so these
tests run in their own environment: ``make test-ray`` (it makes ``.venv-ray`` over ``.venv`` with
``make ray-env``). Elsewhere they skip with one line.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.results.store import load_index
from tests.test_app import ROOT

pytest.importorskip("hydra_plugins.hydra_ray_launcher",
                    reason="the Ray launcher is not installed here; run make test-ray")


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                RAY_USAGE_STATS_ENABLED="0", **extra)


def _sweep(tmp_path: Path, env: dict, *extra: str, allocators: str = "orca-max,paged"):
    args = ["-m", "hydra/launcher=ray", *extra, f"allocator={allocators}", "workload.num_requests=20",
            "progress=false", "logger=none", f"results_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    index = load_index(tmp_path / "index.jsonl")
    assert all((tmp_path / d / "summary.json").is_file() for d in index["run_dir"])
    (sweep,) = {(tmp_path / d).parent for d in index["run_dir"]}
    records = [json.loads(p.read_text()) for p in sorted((sweep / ".jobs").glob("*.json"))]
    return proc, out, index, records


@pytest.mark.slow  # a Ray cluster start and two jobs: about 2 minutes on 2 busy cores
def test_ray_launcher_runs_jobs_in_other_processes_and_indexes_them(tmp_path):
    proc, out, index, records = _sweep(tmp_path, _env(), "+hydra.launcher.ray.init.num_cpus=2",
                                       "+hydra.launcher.ray.init.include_dashboard=false")
    assert sorted(index["allocator_label"]) == ["orca-max", "paged"]
    assert len(records) == 2 and all(r["finished"] for r in records)
    assert all(r["pid"] != proc.pid for r in records)  # the jobs ran in Ray's worker processes
    table = out[out.index("run(s) of this sweep"):].splitlines()
    assert [line.split()[:2] for line in table[2:4]] == [["orca-max", "ok"], ["paged", "ok"]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ray(*args: str, env: dict) -> str:
    ray_cli = Path(sys.executable).with_name("ray")
    command = [str(ray_cli)] if ray_cli.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    proc = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def _proc_cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cluster_pids(port: int, temp_dir: Path) -> list[int]:
    """The processes of the cluster started here: their command lines name its port or temp dir."""
    marks = (f":{port}", f"={port}", str(temp_dir))
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) != os.getpid()
            and any(mark in _proc_cmdline(pid) for mark in marks)]


def _workers_by_raylet(port: int) -> dict[int, int]:
    """Ray worker pid -> the pid of the raylet (one per node) that started it, for this cluster."""
    raylets = {int(pid) for pid in os.listdir("/proc") if pid.isdigit()
               and "raylet" in _proc_cmdline(pid).split(" ", 1)[0] and f":{port}" in _proc_cmdline(pid)}
    found = {}
    for pid in os.listdir("/proc"):
        parent = _parent(pid) if pid.isdigit() else None
        if parent in raylets:
            found[int(pid)] = parent
    return found


def _stop(pids: list[int]) -> None:
    import signal
    import time

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
            time.sleep(0.3)


@pytest.mark.slow  # two Ray nodes and four jobs: about 3 minutes on 2 busy cores
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to tell the nodes' workers apart")
def test_ray_cluster_of_two_nodes_runs_the_sweep_on_both(tmp_path):
    """``ray start --head`` and ``ray start --address=...`` (a second node with its own CPU and
    resource), then a sweep with ``init.address=auto``: every job's row is in the index, and the
    jobs ran in workers of both nodes' raylets (watched in /proc while the sweep runs: Ray ends a
    sweep's workers with it). Only the processes of the cluster started here are stopped."""
    import time

    temp_dir = Path(f"/tmp/kvb-ray-{os.getpid()}")  # short: Ray's socket paths must fit 107 bytes
    assert not temp_dir.exists(), f"{temp_dir} is someone else's"
    port = _free_port()
    head = f"127.0.0.1:{port}"
    env = _env()
    common = ["--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats"]
    try:
        for attempt in range(3):  # Ray waits 30 s for a raylet: a busy machine may need another go
            try:
                _ray("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
                     "--include-dashboard=false", '--resources={"kvb_head": 1}', *common, env=env)
                _ray("start", f"--address={head}", "--node-ip-address=127.0.0.1",
                     '--resources={"kvb_second": 1}', *common, env=env)
                break
            except AssertionError:
                _stop(_cluster_pids(port, temp_dir))
                if attempt == 2:
                    raise
        args = ["-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.address=auto",
                "+hydra.launcher.ray.remote.num_cpus=1", "allocator=orca-max,paged,buddy,contiguous",
                "workload.num_requests=20", "progress=false", "logger=none", f"results_dir={tmp_path}"]
        log = tmp_path / "sweep.log"
        seen: dict[int, int] = {}
        with log.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=tmp_path,
                                    env=_env(RAY_ADDRESS=head), stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 900
            while proc.poll() is None and time.monotonic() < deadline:
                seen.update(_workers_by_raylet(port))
                time.sleep(0.3)
            if proc.poll() is None:
                proc.kill()
        text = log.read_text()
        assert proc.wait() == 0, text[-3000:]
        index = load_index(tmp_path / "index.jsonl")
        assert sorted(index["allocator_label"]) == ["buddy", "contiguous", "orca-max", "paged"]
        (sweep,) = {(tmp_path / d).parent for d in index["run_dir"]}
        records = [json.loads(p.read_text()) for p in sorted((sweep / ".jobs").glob("*.json"))]
        assert len(records) == 4 and all(r["finished"] for r in records)
        assert all(r["pid"] in seen for r in records), (records, seen)
        nodes = {seen[r["pid"]] for r in records}
        assert len(nodes) == 2, f"the jobs ran under {len(nodes)} raylet(s): {records}"
    finally:
        _stop(_cluster_pids(port, temp_dir))
        subprocess.run(["rm", "-rf", "--", str(temp_dir)], check=False)


@pytest.mark.parametrize("args,error", [
    (["+hydra.launcher.ray.init.num_cpus=2"], None),
    (["+hydra.launcher.ray.init.address=auto"], None),
    (["+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.remote.num_cpus=1"], None),
    (["+hydra.launcher.ray.init.num_cpus=-2"], "hydra.launcher.ray.init.num_cpus must be an integer >= 0"),
    (["+hydra.launcher.ray.init.num_cpus=abc"], "hydra.launcher.ray.init.num_cpus must be an integer"),
    (["+hydra.launcher.ray.init.nmu_cpus=2"], "ray.init takes no such argument"),
    (["+hydra.launcher.ray.init.include_dashboard=maybe"], "must be true or false"),
    (["+hydra.launcher.ray.foo=1"], "hydra.launcher.ray.foo: unknown key"),
], ids=["num-cpus", "address-auto", "remote", "num-cpus-negative", "num-cpus-text", "misspelled", "bool",
        "unknown-field"])
def test_ray_settings_are_the_plugins_to_check(args, error, tmp_path):
    """The pre-check composes ``hydra.launcher`` with the Ray launcher's own config: its open
    ``ray.init`` takes ``ray.init``'s arguments, of their kinds."""
    from kvbench.run.precheck import precheck

    line = precheck(["-m", "hydra/launcher=ray", *args, "allocator=paged,buddy", "workload.num_requests=5",
                     f"results_dir={tmp_path / 'r'}"])
    assert (line is None) if error is None else (line is not None and error in line), line
    assert not (tmp_path / "r").exists()


def test_joining_a_cluster_adds_the_object_store_fix(tmp_path):
    from kvbench.run.precheck import precheck
    from kvbench.config.sweeper_checks import ADDED_OVERRIDES

    assert precheck(["-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.address=auto", "allocator=paged,buddy",
                     f"results_dir={tmp_path / 'r'}"]) is None
    assert ADDED_OVERRIDES == ["+hydra.launcher.ray.init.object_store_memory=null"]
