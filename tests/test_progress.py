"""Progress for a person at a terminal: a multirun's line per finished job, a run's bar; never
with progress=false, in CI or where stderr is not a terminal."""
from __future__ import annotations

import io

from omegaconf import OmegaConf

from kvbench.run.progress import RunProgress, clock, count_jobs, job_line, note_multirun_start, read_start, wanted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_only_at_a_terminal_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert wanted(True, Terminal())
    assert not wanted(False, Terminal())
    assert not wanted(True, io.StringIO())  # a log file, a pipe
    monkeypatch.setenv("CI", "true")
    assert not wanted(True, Terminal())


def test_time_left_comes_from_the_finished_jobs_durations():
    start = {"start": 1000.0, "num_jobs": 6, "parallel": 2}
    records = [{"num": 0, "finished": True, "wall_s": 10.0}, {"num": 1, "finished": False, "wall_s": 20.0}]
    line = job_line(records, start, records[1], now=1030.0)
    # 4 jobs left, 15 s each on average, 2 at a time
    assert line == "kvbench: job 2 of 6 done (failed, 20.0 s); 0:30 elapsed, about 0:30 left"
    assert job_line(records * 3, start, records[0], now=1100.0).endswith("1:40 elapsed")  # the last: no estimate
    assert clock(3725) == "1:02:05"


def test_the_job_count_of_the_basic_sweeper_and_of_optuna():
    basic = OmegaConf.create({"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                              "params": {"seed": "0,1,2"}})
    assert count_jobs(["allocator=orca-max,paged", "workload.request_rate=1,2"], basic) == 12
    assert count_jobs(["seed=5"], basic) == 1  # the command line wins over params
    optuna = OmegaConf.create({"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
                               "n_trials": 12})
    assert count_jobs([], optuna) == 12


def test_the_start_record_is_not_a_job_record(tmp_path):
    from kvbench.run.sweep import read_job_records

    note_multirun_start(tmp_path / ".jobs", 4, 1)
    assert read_start(tmp_path / ".jobs")["num_jobs"] == 4
    assert read_job_records(tmp_path) == []


def test_a_job_prints_its_line_at_a_terminal_only(tmp_path, monkeypatch):
    from kvbench.run.sweep import _print_progress, write_job_record

    monkeypatch.delenv("CI", raising=False)
    note_multirun_start(tmp_path / ".jobs", 2, 1)
    record = {"num": 0, "finished": True, "wall_s": 3.0, "run_dir": "x", "overrides": []}
    write_job_record(tmp_path, record)
    for flag, stream, shown in ((True, Terminal(), True), (False, Terminal(), False), (True, io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        _print_progress(OmegaConf.create({"progress": flag}), tmp_path, record)
        assert ("kvbench: job 1 of 2 done (ok, 3.0 s)" in stream.getvalue()) == shown


def test_the_run_bar_shows_requests_simulated_seconds_and_time_left():
    stream = Terminal()
    bar = RunProgress(10, "paged", stream=stream, delay=0.0)
    bar.update_to(3, 12.5)
    bar.bar.refresh()
    bar.close()
    text = stream.getvalue()
    assert "paged: 3/10 req" in text and "sim 12.5 s" in text and "left]" in text


def test_a_run_without_a_terminal_has_no_bar(tmp_path):
    from hydra import compose, initialize_config_dir

    from kvbench.run.console import _progress_bar
    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[])
    assert _progress_bar(cfg, 10, "x") is None  # pytest's stderr is no terminal
