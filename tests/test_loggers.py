"""Loggers: logger=none imports nothing, and an offline W&B run records what it should."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from kvbench.loggers import NullLogger, build_logger, flatten_config, run_tags

ROOT = Path(__file__).resolve().parents[1]
MEM = ("mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac")


def test_logger_none_does_not_import_wandb():
    code = textwrap.dedent(
        """
        import sys
        from omegaconf import OmegaConf
        from kvbench.loggers import build_logger
        import kvbench.results.store as results
        logger = build_logger(OmegaConf.load("conf/logger/none.yaml"))
        logger.start({"a": 1}, run_id="r", name="r", group=None, tags=[])
        logger.log_step(0, {"batch_size": 1})
        logger.log_summary({"run_id": "r"})
        logger.log_requests(None)
        logger.log_figures([])
        logger.finish()
        print(type(logger).__name__, "wandb" in sys.modules, "wandb_workspaces" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["NullLogger", "False", "False"]


def test_build_logger_names():
    assert isinstance(build_logger(None), NullLogger)
    assert isinstance(build_logger({"name": "none"}), NullLogger)
    with pytest.raises(ValueError, match="logger.name='tensorboard' is not allowed"):
        build_logger({"name": "tensorboard"})


def test_logger_configs_compose():
    wandb_cfg = OmegaConf.load(ROOT / "conf/logger/wandb.yaml")
    assert wandb_cfg.name == "wandb" and wandb_cfg.mode == "offline" and wandb_cfg.project == "kvbench"
    assert wandb_cfg.entity is None and wandb_cfg.group is None and wandb_cfg.dir is None
    assert list(wandb_cfg.tags) == [] and wandb_cfg.max_step_logs == 2000
    assert OmegaConf.load(ROOT / "conf/logger/none.yaml").name == "none"


def test_flatten_config_resolves_omegaconf():
    cfg = OmegaConf.create(
        {"allocator": {"name": "paged", "block_size": 16}, "tag": "${allocator.name}-x", "rates": [1, 2], "e": {}}
    )
    assert flatten_config(cfg) == {
        "allocator.name": "paged",
        "allocator.block_size": 16,
        "tag": "paged-x",
        "rates": [1, 2],
        "e": {},
    }
    fields = {"allocator_label": "orca-max", "reserve": "max", "block_size": 16, "workload": "sharegpt",
              "request_rate": 2.0, "experiment": "fig12"}
    assert run_tags(fields) == ["allocator=orca-max", "reserve=max", "block_size=16", "workload=sharegpt",
                                "request_rate=2", "experiment=fig12"]
    assert run_tags({"allocator_label": "paged", "reserve": None, "workload": "fixed"}) == \
        ["allocator=paged", "workload=fixed"]


def test_step_sampler_keeps_at_most_limit_evenly_spaced_steps():
    pytest.importorskip("wandb")
    from kvbench.loggers.wandb_logger import StepSampler

    sampler = StepSampler(limit=8)
    for step in range(100):
        sampler.offer(step, {"batch_size": step, "name": "not a number"})
    rows = sampler.drain()
    steps = [r["step"] for r in rows]
    assert steps == list(range(0, 100, 16))  # 7 rows, stride 16
    assert rows[1] == {"step": 16, "steps/batch_size": 16}

    small = StepSampler(limit=8)
    for step in range(5):
        small.offer(step, {"x": np.float32(0.5)})
    assert [r["step"] for r in small.drain()] == [0, 1, 2, 3, 4]  # under the limit: every step


def _tiny_png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 3), (200, 10, 10)).save(path)
    return path


def test_wandb_offline_run_records_config_history_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from kvbench.loggers.wandb_offline import read_offline_run

    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path),
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_X_DISABLE_STATS": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)

    cfg = OmegaConf.create(
        {"name": "wandb", "project": "kvbench", "entity": None, "mode": "offline", "group": None,
         "tags": ["smoke"], "dir": None, "max_step_logs": 8}
    )  # fmt: skip
    logger = build_logger(cfg)
    run_cfg = {
        "allocator": {"name": "paged", "block_size": 16},
        "workload": {"name": "sharegpt", "request_rate": 2.0},
        "engine": {"max_num_seqs": 4},
    }
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")
    pd.DataFrame({"a": [1]}).to_parquet(run_dir / "requests.parquet")
    logger.start(run_cfg, run_id="r1", name="paged-bs16", group="sweep-7", tags=[], run_dir=run_dir)
    run_path = logger.run_path
    assert run_path.parent == run_dir / "wandb"  # dir defaults to the run directory

    for step in range(20):
        logger.log_step(
            step,
            {
                "batch_size": np.int64(step % 5),
                "num_running": step % 5,
                "num_waiting": 3,
                "num_tokens": 40 + step,
                "step_s": 0.01,
                **{m: np.float64(0.25) for m in MEM},
                "phase": "decode",  # not a number: not logged
            },
        )
    summary = {
        "run_id": "r1", "experiment": "fig2", "allocator": "paged", "block_size": 16,
        "reserve": None, "workload": "sharegpt", "request_rate": 2.0,
        "request_throughput": np.float64(1.5), "normalized_latency_s": 0.02,
        "mean_batch_size": 2.0, "num_preemptions": 0, **{m: 0.25 for m in MEM},
    }  # fmt: skip
    logger.log_summary(summary)
    logger.log_requests(pd.DataFrame({"request_id": [0, 1], "ttft_s": [0.1, 0.2], "status": ["ok", "ok"]}))
    logger.log_figures([_tiny_png(tmp_path / "mem.png"), tmp_path / "mem.pdf"])
    logger.finish()
    logger.finish()  # idempotent

    run = read_offline_run(run_path)
    assert run.project == "kvbench" and run.name == "paged-bs16" and run.group == "sweep-7"
    assert run.tags == ["allocator=paged", "block_size=16", "workload=sharegpt", "request_rate=2", "smoke"]
    assert run.config["allocator_label"] == "paged"
    assert {"name": "run-r1", "type": "kvbench-run", "files": ["requests.parquet", "summary.json"]} in run.artifacts
    assert run.config["allocator.name"] == "paged" and run.config["engine.max_num_seqs"] == 4
    assert run.config["run_id"] == "r1"
    assert run.config["allocator"] == "paged" and run.config["request_rate"] == 2.0  # for grouping
    assert "reserve" not in run.config
    assert run.exit_code == 0

    step_rows = [h for h in run.history if "steps/batch_size" in h]
    assert [h["step"] for h in step_rows] == [0, 4, 8, 12, 16]  # 20 steps, at most 8 kept
    assert step_rows[2]["steps/batch_size"] == 3 and step_rows[2]["steps/num_tokens"] == 48
    assert all(h["steps/mem_token_frac"] == 0.25 and "steps/phase" not in h for h in step_rows)
    rate_rows = [h for h in run.history if "by_rate/request_rate" in h]
    assert len(rate_rows) == 1 and rate_rows[0]["by_rate/normalized_latency_s"] == 0.02
    assert any(h.get("requests/_type") == "table-file" for h in run.history)
    assert any(h.get("figures/mem/_type") == "image-file" for h in run.history)
    assert not any("figures/mem.pdf" in k for h in run.history for k in h)

    assert run.summary["request_throughput"] == 1.5 and run.summary["num_preemptions"] == 0
    assert run.summary["mem_external_frac"] == 0.25 and "reserve" not in run.summary
    assert {"name": "step", "glob": False, "step_metric": ""} in run.metrics
    assert {"name": "*", "glob": True, "step_metric": "step"} in run.metrics

    table_files = list(run_path.glob("files/media/table/requests_*.table.json"))
    assert len(table_files) == 1
    assert len(list(run_path.glob("files/media/images/figures/mem_*.png"))) == 1


def test_read_offline_run_spans_blocks_and_rejects_other_files(tmp_path):
    pytest.importorskip("wandb")
    from kvbench.loggers.wandb_offline import iter_records

    # A log written the way wandb-core writes it: records crossing 32 KiB block boundaries.
    import struct
    import zlib

    def chunk(kind: int, body: bytes) -> bytes:
        return struct.pack("<IHB", zlib.crc32(body, zlib.crc32(bytes([kind]))), len(body), kind) + body

    records = [bytes([i % 251]) * n for i, n in enumerate((10, 40000, 32700, 5, 70000))]
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for rec in records:
        first = True
        while True:
            room = 32768 - len(out) % 32768
            if room < 7:
                out += b"\0" * room
                continue
            piece, rec = rec[: room - 7], rec[room - 7 :]
            kind = (1 if not rec else 2) if first else (4 if not rec else 3)
            out += chunk(kind, piece)
            first = False
            if not rec:
                break
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(out))
    assert [len(r) for r in iter_records(path)] == [10, 40000, 32700, 5, 70000]

    path.write_bytes(b"not a log")
    with pytest.raises(ValueError, match="not a W&B transaction log"):
        list(iter_records(path))


def _app(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_X_DISABLE_STATS="true")  # banner not silenced here
    return subprocess.run([sys.executable, "-m", "kvbench.app", *args, "logger=wandb", "progress=false",
                           "workload.num_requests=20", f"results_dir={cwd}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_wandb_single_run_groups_by_experiment_keeps_a_compared_summary_and_prints_no_banner(tmp_path):
    pytest.importorskip("wandb")
    from kvbench.loggers.sync import find_offline_runs
    from kvbench.loggers.wandb_offline import read_offline_run

    proc = _app("allocator=orca-oracle", "experiment_name=first-hour", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("wandb:")]
    (run_path,) = find_offline_runs([tmp_path])
    run = read_offline_run(run_path)
    assert run.group == "first-hour" and run.config["allocator_label"] == "orca-oracle"
    keys = set(run.summary)
    assert {"request_throughput", "mean_ttft_ms", "p99_ttft_ms", "p95_tpot_ms", "mem_internal_frac"} <= keys
    assert not [k for k in keys if k.startswith(("steps/", "by_rate/"))]
    assert not {"mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "mean_e2e_s", "std_ttft_ms", "wall_s"} & keys
    assert len(keys) < 60


@pytest.mark.slow  # three W&B runs in subprocesses: ~40 s on 2 busy cores
def test_wandb_multirun_logs_one_sweep_table(tmp_path):
    pytest.importorskip("wandb")
    import json

    from kvbench.loggers.sync import find_offline_runs
    from kvbench.loggers.wandb_offline import read_offline_run

    proc = _app("-m", "allocator=paged,orca-max", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = {path: read_offline_run(path) for path in find_offline_runs([tmp_path])}
    tables = [path for path, run in runs.items() if run.name.endswith("-table")]
    assert len(runs) == 3 and len(tables) == 1
    assert len({run.group for run in runs.values()}) == 1  # the table sits in its jobs' group
    (table_file,) = tables[0].glob("files/media/table/sweep_table_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"][:2] == ["allocator", "status"]
    assert [row[:2] for row in table["data"]] == [["orca-max", "ok"], ["paged", "ok"]]
