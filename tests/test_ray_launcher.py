"""``hydra/launcher=ray`` (the Hydra Ray launcher) on a local Ray cluster the sweep starts: the jobs
run in Ray worker processes, and their results, the index and the end-of-sweep table are right.

Skipped where hydra-ray-launcher is not installed (``pip install -e ".[ray]"``; it is not in the
dev extras because it pins cloudpickle < 3)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvbench.results.store import load_index
from tests.test_app import ROOT

pytest.importorskip("hydra_plugins.hydra_ray_launcher")


@pytest.mark.slow  # a Ray cluster start and two jobs: about 2 minutes on 2 busy cores
def test_ray_launcher_runs_jobs_in_other_processes_and_indexes_them(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               RAY_USAGE_STATS_ENABLED="0")
    args = ["-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
            "+hydra.launcher.ray.init.include_dashboard=false", "allocator=orca-max,paged",
            "workload.num_requests=20", "progress=false", "logger=none", f"results_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "kvbench.app", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    index = load_index(tmp_path / "index.jsonl")
    assert sorted(index["allocator_label"]) == ["orca-max", "paged"]
    assert all((tmp_path / d / "summary.json").is_file() for d in index["run_dir"])
    (sweep,) = {(tmp_path / d).parent for d in index["run_dir"]}
    records = [json.loads(p.read_text()) for p in sorted((sweep / ".jobs").glob("*.json"))]
    assert len(records) == 2 and all(r["finished"] for r in records)
    assert all(r["pid"] != proc.pid for r in records)  # the jobs ran in Ray's worker processes
    table = out[out.index("run(s) of this sweep"):].splitlines()
    assert [line.split()[:2] for line in table[2:4]] == [["orca-max", "ok"], ["paged", "ok"]]
