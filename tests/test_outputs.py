"""The one writer (kvbench.results.outputs): every kind of target, refused or written atomically."""
from __future__ import annotations

import json
import os

import pytest

from kvbench.results.outputs import OutputError, check_target, write_many, write_text


@pytest.fixture()
def results(tmp_path):
    """A results folder: an index with one row and one run folder."""
    run = tmp_path / "results" / "runs" / "adhoc" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"run_id": "r1"}))
    (tmp_path / "results" / "index.jsonl").write_text(json.dumps({"run_id": "r1"}) + "\n")
    return tmp_path / "results"


def _refused(path, match, **kw):
    before = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else None
    with pytest.raises(OutputError, match=match) as err:
        write_text(path, "new", **kw)
    assert "\n" not in str(err.value)
    if before is not None:
        assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing left behind


def test_a_new_file_is_written(tmp_path):
    out = write_text(tmp_path / "a.html", "hello")
    assert out.read_text() == "hello"
    assert [p.name for p in tmp_path.iterdir()] == ["a.html"]


def test_an_existing_file_only_with_force(tmp_path):
    target = tmp_path / "a.html"
    target.write_text("old")
    _refused(target, "exists; give another path or --force")
    assert target.read_text() == "old"
    write_text(target, "new", force=True)
    assert target.read_text() == "new"


@pytest.mark.parametrize("force", [False, True])
def test_the_results_index_is_never_written(results, force):
    index = results / "index.jsonl"
    text = index.read_text()
    _refused(index, "results index", force=force)
    _refused(results / "index.jsonl.lock", "results index", force=force)
    assert index.read_text() == text


@pytest.mark.parametrize("force", [False, True])
def test_a_copy_of_an_index_under_another_name_is_refused(results, force):
    other = results / "rows.txt"
    other.write_text((results / "index.jsonl").read_text())
    _refused(other, "results index", force=force)


@pytest.mark.parametrize("name", ["summary.json", "report.html", "steps.parquet"])
def test_nothing_inside_a_run_folder(results, name):
    run = results / "runs" / "adhoc" / "r1"
    _refused(run / name, "inside a run folder", force=True)
    assert json.loads((run / "summary.json").read_text()) == {"run_id": "r1"}


def test_nothing_under_runs_even_in_a_fresh_subfolder(results):
    sweep = results / "runs" / "adhoc" / "sweep-1"
    sweep.mkdir()
    _refused(sweep / "report.html", "inside a run folder")


@pytest.mark.parametrize("force", [False, True])
def test_a_symbolic_link_is_never_replaced(tmp_path, force):
    real = tmp_path / "real.html"
    real.write_text("real")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    _refused(link, "symbolic link", force=force)
    assert link.is_symlink() and real.read_text() == "real"
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "nowhere")
    _refused(dangling, "symbolic link", force=force)
    assert dangling.is_symlink()


@pytest.mark.parametrize("force", [False, True])
def test_a_directory_is_refused_in_one_line(tmp_path, force):
    folder = tmp_path / "fig"
    folder.mkdir()
    _refused(folder, "is a directory", force=force)
    assert folder.is_dir() and not any(folder.iterdir())


def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        write_text(tmp_path / "no" / "a.html", "x")
    assert not (tmp_path / "no").exists()


def test_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(fifo, "not a regular file", force=True)


def test_an_empty_name_is_refused():
    with pytest.raises(OutputError, match="names no file"):
        check_target("")


def test_several_files_all_or_none(tmp_path):
    (tmp_path / "fig.svg").symlink_to(tmp_path / "elsewhere.svg")
    with pytest.raises(OutputError, match="symbolic link"):
        write_many([tmp_path / "fig.png", tmp_path / "fig.svg"], [lambda f: f.write(b"png")] * 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.svg"]


def test_a_failing_writer_leaves_nothing(tmp_path):
    def boom(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    target = tmp_path / "a.html"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        write_many([target], [boom], force=True)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.html"]


def test_a_folder_the_tool_made_is_its_own(results):
    """kvbench-capacity's search folder under runs/: its own file is written there, a link still is not."""
    search = results / "runs" / "adhoc" / "capacity-1"
    search.mkdir()
    _refused(search / "capacity.json", "inside a run folder")
    assert write_text(search / "capacity.json", "{}", owned=search).read_text() == "{}"
    (search / "link.json").symlink_to(results / "index.jsonl")
    _refused(search / "link.json", "symbolic link", owned=search, force=True)
    _refused(results / "runs" / "adhoc" / "r1" / "capacity.json", "inside a run folder", owned=search)
