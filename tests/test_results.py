"""The results store: run files, the shared index, readers and the kvbench-results CLI."""
from __future__ import annotations

import json
import multiprocessing as mp
import os

import numpy as np
import pandas as pd
import pytest

from kvbench.results import cli as results_cli
import kvbench.results.reindex as reindex_mod
from kvbench.results import store as results
from kvbench.results.store import SUMMARY_COLUMNS, compare, load_index, load_requests, load_steps, write_run


def _summary(run_id: str, **extra) -> dict:
    base = {
        "run_id": run_id,
        "experiment": "fig2",
        "allocator": "paged",
        "block_size": 16,
        "workload": "sharegpt",
        "request_rate": 2.0,
        "mean_batch_size": 7.5,
        "mem_token_frac": 0.6,
        "mem_reserved_frac": 0.1,
        "mem_internal_frac": 0.05,
        "mem_external_frac": 0.25,
        "num_preemptions": 0,
    }
    return {**base, **extra}


def _frames(n: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = pd.DataFrame({"step": np.arange(n), "batch_size": np.arange(n) + 1, "mem_token_frac": 0.5})
    requests = pd.DataFrame({"request_id": np.arange(n), "ttft_s": np.linspace(0.1, 0.3, n)})
    return steps, requests


def test_summary_columns_are_the_design_contract():
    assert SUMMARY_COLUMNS == (
        "run_id", "experiment", "allocator", "reserve", "block_size", "backend", "device",
        "gpu_profile", "model", "workload", "request_rate", "num_requests", "kv_slots",
        "kv_bytes", "seed", "duration_s", "request_throughput", "output_token_throughput",
        "total_token_throughput", "mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s",
        "mean_e2e_s", "normalized_latency_s", "mean_batch_size", "max_batch_size",
        "mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac",
        "num_preemptions", "prefix_hit_rate", "sharing_saving_frac", "num_finished",
        "num_rejected",
    )  # fmt: skip


def test_write_run_files_nulls_and_index_row(tmp_path):
    index = tmp_path / "results" / "index.jsonl"
    run_dir = tmp_path / "results" / "runs" / "r1"
    steps, requests = _frames()
    summary = _summary(
        "r1",
        seed=np.int64(3),
        mean_ttft_s=np.float32(0.25),
        prefix_hit_rate=float("nan"),
        debug=np.bool_(True),
        git_commit="abc123",
    )
    assert write_run(run_dir, summary, steps, requests, index) == run_dir

    assert sorted(p.name for p in run_dir.iterdir()) == [
        "requests.parquet", "steps.parquet", "summary.json",
    ]  # fmt: skip; no temporary files left
    written = json.loads((run_dir / "summary.json").read_text())
    assert list(written)[: len(SUMMARY_COLUMNS)] == list(SUMMARY_COLUMNS)
    assert list(written)[len(SUMMARY_COLUMNS) :] == ["debug", "git_commit"]
    assert written["reserve"] is None and written["num_finished"] is None  # missing: null, not 0
    assert written["prefix_hit_rate"] is None  # NaN: null
    assert written["num_preemptions"] == 0  # a real 0 stays 0
    assert written["seed"] == 3 and type(written["seed"]) is int
    assert written["mean_ttft_s"] == pytest.approx(0.25) and written["debug"] is True

    lines = index.read_text().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    assert row["run_dir"] == "runs/r1"  # relative to the index's folder
    assert {k: v for k, v in row.items() if k != "run_dir"} == written

    pd.testing.assert_frame_equal(load_steps(run_dir), steps)
    pd.testing.assert_frame_equal(load_requests("r1", index=index), requests)
    assert results.load_summary("r1", index=index)["allocator"] == "paged"


def test_infinite_request_rate_round_trips(tmp_path):
    index = tmp_path / "index.jsonl"
    write_run(tmp_path / "r1", _summary("r1", request_rate=np.float64("inf")), *_frames(), index)
    assert results.load_summary(tmp_path / "r1")["request_rate"] == float("inf")
    assert load_index(index)["request_rate"].tolist() == [float("inf")]


def test_run_dir_outside_the_index_folder_is_absolute(tmp_path):
    index = tmp_path / "results" / "index.jsonl"
    write_run(tmp_path / "elsewhere", _summary("r1"), *_frames(), index)
    row = json.loads(index.read_text())
    assert row["run_dir"] == str((tmp_path / "elsewhere").resolve())
    assert len(load_steps("r1", index=index)) == 3


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"run_id": "r1", "kv_bytes": [1, 2]}, TypeError),
        ({"run_id": "r1", "when": pd.Timestamp("2024-01-01")}, TypeError),
        ({"allocator": "paged"}, ValueError),  # no run_id
    ],
)
def test_bad_summary_writes_nothing(tmp_path, bad, error):
    index = tmp_path / "index.jsonl"
    with pytest.raises(error):
        write_run(tmp_path / "run", bad, *_frames(), index)
    assert not (tmp_path / "run").exists() and not index.exists()


def test_failed_parquet_write_leaves_no_partial_files(tmp_path):
    index = tmp_path / "index.jsonl"
    steps, requests = _frames()
    requests["payload"] = [object(), object(), object()]  # pyarrow cannot store these
    with pytest.raises(Exception):
        write_run(tmp_path / "run", _summary("r1"), steps, requests, index)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["steps.parquet"]
    assert not index.exists()


def _append_rows(args) -> None:
    index, worker, count = args
    steps, requests = _frames(2)
    for i in range(count):
        run_dir = os.path.join(os.path.dirname(index), "runs", f"w{worker}-{i}")
        write_run(run_dir, _summary(f"w{worker}-{i}", note="x" * 2000), steps, requests, index)


def test_concurrent_appends_keep_every_row_whole(tmp_path):
    index = str(tmp_path / "index.jsonl")
    workers, count = 4, 15
    # spawn, not fork: a fork of a process with threads (a W&B service an earlier test started) can
    # deadlock in the child on a lock another thread held
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.map(_append_rows, [(index, w, count) for w in range(workers)])
    lines = open(index).read().splitlines()
    assert len(lines) == workers * count
    ids = {json.loads(line)["run_id"] for line in lines}  # every line parses
    assert ids == {f"w{w}-{i}" for w in range(workers) for i in range(count)}


def test_load_index_dedupes_orders_columns_and_survives_torn_lines(tmp_path):
    index = tmp_path / "index.jsonl"
    for run_id, rate in (("a", 1.0), ("b", 2.0), ("a", 3.0)):
        results.append_index_row(index, {"zeta": 1, **_summary(run_id, request_rate=rate)})
    with open(index, "a") as f:
        f.write('{"run_id": "torn", "allocat')  # a writer died mid-line

    df = load_index(index)  # a torn last line is skipped silently
    assert list(df["run_id"]) == ["b", "a"]
    assert list(df.loc[df.run_id == "a", "request_rate"]) == [3.0]  # the last row wins
    assert list(df.columns[: len(SUMMARY_COLUMNS)]) == list(SUMMARY_COLUMNS)
    assert list(df.columns[len(SUMMARY_COLUMNS) :]) == ["run_dir", "zeta"]
    assert df["reserve"].isna().all()
    assert df["block_size"].dtype == "Int64" and df["num_finished"].dtype == "Int64"
    assert len(load_index(index, dedupe=False)) == 3

    # the next append starts on a fresh line; the torn one is skipped with a warning
    results.append_index_row(index, _summary("c"))
    assert index.read_text().count("\n") == 5
    with pytest.warns(UserWarning, match="not a JSON object"):
        df = load_index(index)
    assert list(df["run_id"]) == ["b", "a", "c"]


def test_compare_sorts_by_group_and_rejects_unknown_columns():
    df = pd.DataFrame(
        {
            "experiment": ["y", "x", "y", "x"],
            "allocator": ["paged", "buddy", "contiguous", "paged"],
            "mean_batch_size": [4.0, 2.0, 1.0, 3.0],
        }
    )
    out = compare(df, ["allocator", "mean_batch_size"])
    assert list(out.columns) == ["experiment", "allocator", "mean_batch_size"]
    assert list(out["allocator"]) == ["buddy", "paged", "paged", "contiguous"]
    with pytest.raises(KeyError, match="nope"):
        compare(df, ["allocator", "nope"])


@pytest.fixture
def index_with_two_experiments(tmp_path):
    index = tmp_path / "index.jsonl"
    results.append_index_row(index, _summary("r1"))
    results.append_index_row(index, _summary("r2", allocator="buddy", reserve="pow2", block_size=None))
    results.append_index_row(index, _summary("r3", experiment="fig7", request_rate=4.0))
    return index


def test_cli_table_groups_by_experiment(index_with_two_experiments, capsys):
    assert results_cli.main(["--index", str(index_with_two_experiments)]) == 0
    out = capsys.readouterr().out
    assert out.index("== fig2 ==") < out.index("== fig7 ==")
    assert "orca-pow2" in out and "mem_external_frac" in out  # the label, not "buddy"


def test_cli_csv_markdown_and_experiment_filter(index_with_two_experiments, capsys):
    idx = str(index_with_two_experiments)
    assert results_cli.main(["--index", idx, "--columns", "allocator,block_size", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "experiment,allocator,block_size",
        "fig2,paged,16",
        "fig2,buddy,",
        "fig7,paged,16",
    ]
    argv = ["--index", idx, "--columns", "allocator,reserve", "--format", "markdown", "--experiment", "fig2"]
    assert results_cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines() == [
        "### fig2",
        "",
        "| allocator | reserve |",
        "| --- | --- |",
        "| paged | - |",
        "| buddy | pow2 |",
    ]


def test_cli_unknown_column_is_one_line_and_exit_2(index_with_two_experiments, capsys):
    assert results_cli.main(["--index", str(index_with_two_experiments), "--columns", "allocator,bogus"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "bogus" in captured.err


def test_cli_missing_index_exit_2(tmp_path, capsys):
    assert results_cli.main(["--index", str(tmp_path / "none.jsonl")]) == 2
    assert "no index" in capsys.readouterr().err


def test_cli_group_by_sort_where_and_labels(index_with_two_experiments, capsys):
    idx = str(index_with_two_experiments)
    argv = ["--index", idx, "--columns", "allocator_label,request_rate", "--format", "csv"]
    assert results_cli.main([*argv, "--group-by", "", "--sort=-request_rate,allocator_label"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "allocator_label,request_rate", "paged,4.0", "orca-pow2,2.0", "paged,2.0"]  # labels filled for old rows
    assert results_cli.main([*argv, "--where", "request_rate<3", "--where", "allocator_label!=paged"]) == 0
    assert capsys.readouterr().out.splitlines() == ["experiment,allocator_label,request_rate", "fig2,orca-pow2,2.0"]
    assert results_cli.main(["--index", idx, "--columns", "request_rate", "--group-by", "allocator_label"]) == 0
    out = capsys.readouterr().out
    assert out.index("== orca-pow2 ==") < out.index("== paged ==")  # groups in sorted order
    for bad in (["--where", "request_rate>>1"], ["--where", "nope=1"], ["--sort", "nope"], ["--group-by", "nope"]):
        assert results_cli.main(["--index", idx, *bad]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_sweep_keeps_the_runs_of_one_sweep_directory(tmp_path, capsys):
    index = tmp_path / "index.jsonl"
    results.append_index_row(index, {**_summary("a"), "run_dir": "runs/x/sweep1/0"})
    results.append_index_row(index, {**_summary("b"), "run_dir": "runs/x/sweep2/0"})
    argv = ["--index", str(index), "--columns", "run_id", "--format", "csv", "--group-by", ""]
    assert results_cli.main([*argv, "--sweep", str(tmp_path / "runs/x/sweep2")]) == 0
    assert capsys.readouterr().out.splitlines() == ["run_id", "b"]


# -- finished runs without a row, --reindex that loses nothing, --clean, the CLI's edges ---------


def _finished(results_dir, run_id: str, where: str = "runs/adhoc", **extra):
    steps, requests = _frames()
    return write_run(results_dir / where / run_id, _summary(run_id, **extra), steps, requests,
                     results_dir / "index.jsonl")


def test_readers_see_a_finished_run_that_lacks_its_row(tmp_path, capsys):
    _finished(tmp_path, "a")
    lost = _finished(tmp_path, "b")
    index = tmp_path / "index.jsonl"
    index.write_text(index.read_text().splitlines()[0] + "\n")  # killed between summary.json and the row
    df = load_index(index)
    assert list(df["run_id"]) == ["a", "b"] and df["run_dir"].iloc[1] == "runs/adhoc/b"
    assert list(load_index(index, unindexed=False)["run_id"]) == ["a"]
    index.unlink()  # killed before the very first row
    assert list(load_index(index)["run_id"]) == ["a", "b"]
    assert results_cli.main(["--index", str(index), "--columns", "run_id", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["experiment,run_id", "fig2,a", "fig2,b"]
    assert lost.is_dir()


def test_reindex_keeps_rows_of_finished_runs_outside_runs_and_of_gone_ones(tmp_path, capsys):
    results_dir = tmp_path / "results"
    _finished(results_dir, "in")
    outside = write_run(tmp_path / "elsewhere" / "out", _summary("out"), *_frames(), results_dir / "index.jsonl")
    gone = _finished(results_dir, "gone")
    index = results_dir / "index.jsonl"
    for path in gone.iterdir():
        path.unlink()
    gone.rmdir()
    done = reindex_mod.reindex(index)
    assert (done.rows, done.kept, done.missing) == (3, 1, 1)  # the gone run's row is kept, and counted
    assert sorted(r["run_id"] for r in map(json.loads, index.read_text().splitlines())) == ["gone", "in", "out"]
    assert results_cli.main(["--index", str(index), "--reindex"]) == 0
    line = capsys.readouterr().out.strip()
    assert "1 kept from outside runs/" in line and "1 kept whose run dir is gone" in line, line
    before = index.read_bytes()
    os.rename(results_dir / "runs", tmp_path / "runs-gone")  # runs/ missing: refused, nothing lost
    assert results_cli.main(["--index", str(index), "--reindex"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no runs/ folder" in err and "3 rows" in err and len(err.splitlines()) == 1
    assert index.read_bytes() == before and outside.is_dir()


@pytest.mark.parametrize("content", ["[]", '{"run_id": "x", "nested": {"a": 1}}', "{", '"text"'])
def test_reindex_skips_a_summary_that_is_not_one_and_says_so(tmp_path, capsys, content):
    _finished(tmp_path, "good")
    bad = tmp_path / "runs" / "adhoc" / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text(content)
    assert results_cli.main(["--index", str(tmp_path / "index.jsonl"), "--reindex"]) == 0
    line = capsys.readouterr().out.strip()
    assert len(line.splitlines()) == 1 and "1 finished runs" in line and "1 unreadable summary.json" in line
    assert list(load_index(tmp_path / "index.jsonl")["run_id"]) == ["good"]


def test_clean_removes_only_dead_dirs_that_kvbench_made(tmp_path):
    from kvbench.run.rundir import RUNNING_FILE, hold_run_lock

    runs = tmp_path / "runs" / "adhoc"
    dead, live, user, startup = (runs / n for n in ("dead", "live", "user", "startup"))
    for folder in (dead, live, user, startup):
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text("a: 1\n")
    (dead / RUNNING_FILE).write_text(json.dumps({"kvbench_run": "dead", "pid": 1, "made_dir": True}))
    (dead / ".steps.parquet.7.tmp").write_bytes(b"half")
    os.environ["KVBENCH_KEEP_DIR"] = str(tmp_path)
    try:
        handle = hold_run_lock(live, "live")  # a live run holds its lock
    finally:
        del os.environ["KVBENCH_KEEP_DIR"]
    (user / RUNNING_FILE).write_text("")  # a stray .running in a user's folder
    (user / "notes.txt").write_text("mine")
    try:
        assert reindex_mod.clean(tmp_path / "index.jsonl") == [dead]
    finally:
        handle.close()
    assert not dead.exists() and live.is_dir() and (user / "notes.txt").read_text() == "mine"
    assert startup.is_dir()  # no record yet (a run in its start-up window): not provably dead


@pytest.mark.parametrize("argv, message", [
    (["--index", "{tmp}"], "is a folder"),
    (["--index", "{tmp}", "--reindex"], "is a folder"),
    (["--reindex", "--index", "{tmp}/nope/sub/index.jsonl"], "no results folder"),
    (["--clean", "--index", "{tmp}/nope/index.jsonl"], "no results folder"),
    (["--index", "{tmp}/index.jsonl", "--columns", ""], "names no column"),
    (["--index", "{tmp}/index.jsonl", "--columns", " , "], "names no column"),
    (["--index", "{tmp}/index.jsonl", "--where", "chunked_prefill=maybe"], "true/false"),
    (["--index", "{tmp}/index.jsonl", "--where", "chunked_prefill>true"], "use = or !="),
])
def test_cli_edges_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    _finished(tmp_path, "a", chunked_prefill=True)
    before = sorted(p for p in tmp_path.rglob("*"))
    assert results_cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert sorted(p for p in tmp_path.rglob("*")) == before  # no folder, no empty index


def test_cli_where_takes_a_boolean_and_sort_takes_mixed_types(tmp_path, capsys):
    _finished(tmp_path, "a", chunked_prefill=True, baseline="orca")
    _finished(tmp_path, "b", chunked_prefill=False, baseline=3.5)
    _finished(tmp_path, "c", chunked_prefill=None, baseline=1)
    argv = ["--index", str(tmp_path / "index.jsonl"), "--columns", "run_id", "--format", "csv", "--group-by", ""]
    assert results_cli.main([*argv, "--where", "chunked_prefill=true"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run_id", "a"]
    assert results_cli.main([*argv, "--where", "chunked_prefill!=True"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run_id", "b"]
    assert results_cli.main([*argv, "--sort", "baseline"]) == 0  # numbers by value, then text
    assert capsys.readouterr().out.splitlines() == ["run_id", "c", "b", "a"]
    assert results_cli.main([*argv, "--sort=-baseline"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run_id", "a", "b", "c"]
