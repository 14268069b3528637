"""Issue 53, part 1: a run's record holds every setting it ran with, and nothing averages runs that
differ in one.

By construction: every leaf of every config file in ``conf/`` is given a second value of its type,
the two resolved configs are recorded as the run records them (``kvbench.results.settings.record``
over ``kvbench.run.lifecycle._resolved``), and ``kvbench-results --compare``, ``kvbench-plot``'s
points and ``kvbench-report``'s settings keep the two rows apart; seeds are averaged (the repeat
axis), and what is not a setting is not recorded. End to end: tiny sim runs put the leaves in
``summary.json``, the index row and the W&B config, and hybrid_static runs that differ only in
``allocator.ratios`` stay apart in ``kvbench-results --compare``.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.results.compare import compare_groups
from kvbench.results.grouping import settings_that_vary, split
from kvbench.results.settings import KEYS_COLUMN, PREFIX, config_leaves, excluded, is_seed, record
from kvbench.results.store import append_index_row, clean_summary, load_index
from kvbench.run.lifecycle import _resolved
from kvbench.tools.plot_data import PlotError, series_points
from kvbench.tools.report import varying_settings

GROUP_DIRS = sorted(p for p in Path(CONF_DIR).iterdir() if p.is_dir())


def _variants() -> list[tuple[str, list[str]]]:
    """(config file, overrides choosing it): config.yaml, then every file of every group."""
    in_defaults = {str(next(iter(d))) for d in OmegaConf.load(Path(CONF_DIR) / "config.yaml").defaults
                   if not isinstance(d, str)}
    out = [("config.yaml", [])]
    for folder in GROUP_DIRS:
        add = "" if folder.name in in_defaults else "+"  # +baseline=orca-max
        for path in sorted(folder.glob("*.yaml")):
            out.append((f"{folder.name}/{path.name}", [f"{add}{folder.name}={path.stem}"]))
    return out


@lru_cache(maxsize=1)
def _composed() -> dict[str, dict]:
    """Per config file, the resolved config the run would record (as ``run`` resolves it)."""
    from hydra import compose, initialize_config_dir

    out = {}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for name, overrides in _variants():
            out[name] = _resolved(compose(config_name="config", overrides=overrides))
    return out


def _file_leaves(name: str) -> list[str]:
    """The dotted keys of the leaves a config file sets, where they land in the composed config."""
    loaded = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / name), resolve=False)
    text = (Path(CONF_DIR) / name).read_text()
    group = "" if name == "config.yaml" or "@package _global_" in text else name.split("/")[0] + "."
    loaded.pop("defaults", None)
    keys = []

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(f"{prefix}{key}.", value)
        else:
            keys.append(prefix[:-1])

    walk(group, loaded)
    return keys


def _leaf_cases() -> list[tuple[str, str]]:
    """(config file, leaf key): every leaf every file sets, each key once."""
    seen, cases = set(), []
    for name, _ in _variants():
        for key in _file_leaves(name):
            if key not in seen:
                seen.add(key)
                cases.append((name, key))
    return cases


def _get(config: dict, key: str) -> object:
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def _set(config: dict, key: str, value: object) -> dict:
    out = copy.deepcopy(config)
    *path, last = key.split(".")
    node = out
    for part in path:
        node = node[part]
    node[last] = value
    return out


def second_value(value: object) -> object:
    """Another value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5 if value == value and abs(value) != float("inf") else 1.0
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, list):
        return [*value, value[-1]] if value else [1]
    if isinstance(value, dict):
        return {**value, "other": 1}
    return 1  # null: any value differs


def _rows(tmp_path: Path, first: dict, second: dict) -> pd.DataFrame:
    """Two index rows alike in every column but the record and what differs from seed to seed,
    written and read back as the index does."""
    index = tmp_path / "index.jsonl"
    for run_id, seed, throughput, config in (("a", 0, 1.0, first), ("b", 1, 3.0, second)):
        row = {"run_id": run_id, "experiment": "prop", "allocator": "paged", "allocator_label": "paged",
               "block_size": 16, "workload": "synthetic", "model": "opt-13b", "request_rate": 1.0, "seed": seed,
               "request_throughput": throughput, "commit": run_id, "wall_s": 1.0 + seed} | record(config)
        append_index_row(index, clean_summary(row))
    return load_index(index, unindexed=False)


def test_every_file_of_every_group_is_composed_and_every_leaf_it_sets_is_recorded():
    composed = _composed()
    assert len(composed) == 1 + sum(len(list(d.glob("*.yaml"))) for d in GROUP_DIRS)
    for name, _ in _variants():
        recorded = record(composed[name])
        for key in _file_leaves(name):
            if excluded(key):
                assert PREFIX + key not in recorded, key
            else:
                assert PREFIX + key in recorded, f"{name}: {key} not recorded"


def test_what_is_not_a_setting_is_left_out_and_values_are_json_stable():
    leaves = config_leaves({"hydra": {"run": {"dir": "x"}}, "results_dir": "r", "progress": True,
                            "logger": {"name": "wandb", "tags": []}, "optimized_metric": "m",
                            "metrics": {"report": True, "percentiles": [90, 99], "goodput": None},
                            "allocator": {"ratios": [2, 1], "opts": {}, "b": {"y": 1, "x": [{"k": 2, "a": 1}]}}})
    assert leaves == {"metrics.percentiles": "[90,99]", "metrics.goodput": None, "allocator.ratios": "[2,1]",
                      "allocator.opts": "{}", "allocator.b.y": 1, "allocator.b.x": '[{"a":1,"k":2}]'}
    assert record({"a": {"b": 1}})[KEYS_COLUMN] != record({"a": {"c": 1}})[KEYS_COLUMN]  # other keys: apart


@pytest.mark.parametrize(("name", "key"), _leaf_cases(), ids=lambda v: str(v))
def test_two_runs_that_differ_in_one_leaf_are_never_averaged(name, key, tmp_path):
    """Compare, plot and report keep runs apart that differ in any one recorded leaf; seeds alone
    are averaged."""
    config = _composed()[name]
    if excluded(key):  # not a setting (kvbench.results.settings.NOT_SETTINGS): not recorded
        assert not [c for c in record(config) if c == PREFIX + key or c.startswith(PREFIX + key + ".")]
        return
    value = _get(config, key)
    runs = _rows(tmp_path, config, _set(config, key, second_value(value)))
    column = PREFIX + key
    compared = compare_groups(runs, "allocator_label", "paged", ["request_throughput"])
    counts = [n for _, table in compared for n in table["runs"]]
    if is_seed(column):  # the repeat axis: one row of two runs
        assert counts == [2] and settings_that_vary(runs) == []
        return
    assert counts == [1, 1], f"{column}: compare averaged {value!r} with {second_value(value)!r}"
    with pytest.raises(PlotError, match=f"differ in {column} "):
        series_points(runs, "request_rate", ["request_throughput"], None, None, x_is_setting=True)
    drawn = series_points(runs, "request_rate", ["request_throughput"], column, None, x_is_setting=True)
    assert list(drawn["runs"]) == [1, 1]
    assert column in varying_settings(runs)  # the report's settings that vary, its runs table's keys


def test_a_row_without_a_record_is_never_averaged_with_one_that_has_it(tmp_path):
    config = _composed()["config.yaml"]
    index = tmp_path / "index.jsonl"
    base = {"experiment": "old", "allocator": "paged", "allocator_label": "paged", "request_rate": 1.0}
    for run_id, seed, recorded in (("new", 0, record(config)), ("old1", 1, {}), ("old2", 2, {})):
        append_index_row(index, clean_summary(base | {"run_id": run_id, "seed": seed, "request_throughput": 1.0}
                                              | recorded))
    runs = load_index(index, unindexed=False)
    assert [len(part) for part in split(runs, settings_that_vary(runs))] == [1, 1, 1]
    compared = compare_groups(runs, "allocator_label", "paged", ["request_throughput"])
    assert [n for _, table in compared for n in table["runs"]] == [1, 1, 1]


# ----------------------------------------------------------------------------- end to end


def _compose(tmp_path: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["backend=sim", "logger=none", "progress=false",
                                                        f"results_dir={tmp_path}", *overrides])


def test_a_sim_run_records_its_leaves_in_the_summary_and_the_index_row(tmp_path):
    from kvbench.run.lifecycle import run

    summary = run(_compose(tmp_path, "workload.num_requests=4", "engine.max_num_seqs=7", "seed=3"))
    written = json.loads(next(tmp_path.glob("runs/*/*/summary.json")).read_text())
    row = load_index(tmp_path / "index.jsonl", unindexed=False).iloc[0].to_dict()
    cfg = {k: v for k, v in written.items() if k.startswith(PREFIX)}
    assert cfg["cfg.engine.max_num_seqs"] == 7 and cfg["cfg.allocator.name"] == "paged"
    assert cfg["cfg.allocator.block_size"] == 16 and cfg["cfg.seed"] == 3 and cfg["cfg.model.name"] == "opt-13b"
    assert cfg["cfg.metrics.percentiles"] == "[90,95,99]" and cfg["cfg.engine.kv_cache_bytes"] is None
    assert written["nonfinite"] == "request_rate=inf,cfg.workload.request_rate=inf"  # strict JSON, as before
    assert not [k for k in cfg if k.startswith(("cfg.hydra", "cfg.logger", "cfg.results_dir", "cfg.progress"))]
    assert written[KEYS_COLUMN] == summary[KEYS_COLUMN] == row[KEYS_COLUMN]
    assert {k: row[k] for k in cfg} == {k: summary[k] for k in cfg} | {"cfg.workload.request_rate": float("inf")}


def test_hybrid_static_runs_with_other_ratios_stay_apart_in_compare(tmp_path, capsys):
    from kvbench.results.cli import main
    from kvbench.run.lifecycle import run

    common = ("allocator=hybrid_static", "model=gemma-2-2b", "workload.num_requests=6", "engine.kv_cache_bytes=2e8")
    for ratios, seed in (("[1,1]", 0), ("[1,1]", 1), ("[3,1]", 0)):
        run(_compose(tmp_path, *common, f"allocator.ratios={ratios}", f"seed={seed}"))
    assert main(["--index", str(tmp_path / "index.jsonl"), "--compare", "allocator_label", "--baseline",
                 "hybrid_static", "--metrics", "request_throughput", "--format", "csv"]) == 0
    table = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert sorted(zip(table["allocator_label"], table["runs"])) == [
        ("hybrid_static (cfg.allocator.ratios=[1,1])", 2), ("hybrid_static (cfg.allocator.ratios=[3,1])", 1)]


def test_the_wandb_config_holds_the_record(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from kvbench.loggers import build_logger
    from kvbench.loggers.wandb_offline import read_offline_run

    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
                       "WANDB_CONSOLE": "off", "WANDB_X_DISABLE_STATS": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    logger = build_logger(OmegaConf.create({"name": "wandb", "project": "kvbench", "entity": None, "mode": "offline",
                                            "group": None, "tags": [], "dir": None, "max_step_logs": 8}))
    config = {"allocator": {"name": "hybrid_static", "ratios": [3, 1], "split_len": None}, "seed": 0}
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    logger.start(config, run_id="r1", name="r1", run_dir=run_dir)
    run_path = logger.run_path
    logger.log_summary({"run_id": "r1", "allocator": "hybrid_static", "request_throughput": 1.0} | record(config))
    logger.finish()
    saved = read_offline_run(run_path).config
    assert saved["cfg.allocator.ratios"] == "[3,1]" and saved["cfg.allocator.name"] == "hybrid_static"
    assert "cfg.allocator.split_len" in saved and saved["cfg.allocator.split_len"] is None
    assert saved[KEYS_COLUMN] == record(config)[KEYS_COLUMN]
