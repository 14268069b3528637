"""``kvbench-capacity``: bracketing then bisection, SLOs, bad input, and the answer against a
grid scan of the same tiny simulated runs."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kvbench.tools.capacity import Probe, capacity, main, search
from kvbench.tools.slo import SLOError, meets, parse_slo

# a tiny simulated stream on a small KV pool: orca-pow2 and paged part ways within a few req/s
TINY = ["workload.num_requests=20", "workload.distribution=uniform", "workload.prompt_min=16",
        "workload.prompt_max=64", "workload.output_min=16", "workload.output_max=64",
        "engine.kv_cache_bytes=500000000", "logger=none"]
SLO_TEXT = "p99_ttft_ms=500"


def _threshold_probe(threshold: float, log: list[float]):
    def probe(value: float) -> Probe:
        log.append(value)
        return Probe(value, value <= threshold, "")
    return probe


@pytest.mark.parametrize("threshold", [0.7, 3.3, 9.99, 17.0, 63.0])
def test_bisection_brackets_the_threshold_within_the_tolerance(threshold):
    probed: list[float] = []
    held, failed, probes = search(_threshold_probe(threshold, probed), low=0.5, high=64.0, tolerance=0.1)
    assert held <= threshold < failed and failed - held <= 0.1
    assert len(probes) == len(probed) <= math.ceil(math.log2(128)) + math.ceil(math.log2(64 / 0.1)) + 1
    grid = [v for v in np.arange(0.5, 64.0, 0.05) if v <= threshold]  # a fine grid scan of the same probe
    assert abs(grid[-1] - held) <= 0.1


def test_below_the_lowest_and_above_the_ceiling_say_so():
    assert search(_threshold_probe(0.1, []), low=0.5, high=8, tolerance=0.1)[:2] == (None, 0.5)
    assert search(_threshold_probe(100, []), low=0.5, high=8, tolerance=0.1)[:2] == (8, None)


def test_integer_knob_bisects_to_neighbours():
    held, failed, _ = search(_threshold_probe(13, []), low=1, high=256, tolerance=1, integer=True)
    assert (held, failed) == (13, 14)


@pytest.mark.parametrize("text, message", [
    ("p99_ttfb_ms=100", "unknown metric 'p99_ttfb_ms'"),
    ("p99_ttft_ms=0", "must be a finite number > 0"),
    ("p99_ttft_ms=-5", "must be a finite number > 0"),
    ("p50_ttft_ms=100", "percentile 50 in metrics.percentiles"),
    ("goodput=0.9", "metrics.goodput"),
    ("p99_ttft_ms", "is not METRIC=BOUND"),
])
def test_bad_slos_are_one_line(text, message):
    with pytest.raises(SLOError, match=message.replace("(", r"\(")):
        parse_slo(text)


def test_an_slo_holds_on_every_bound_and_never_on_a_run_that_served_nothing():
    slo = parse_slo("p99_ttft_ms=100,goodput=0.9", goodput_set=True)
    run = {"p99_ttft_ms": 80.0, "request_goodput": 9.5, "request_throughput": 10.0, "num_finished": 5,
           "num_rejected": 0}
    assert meets(run, slo)[0]
    assert not meets({**run, "request_goodput": 8.0}, slo)[0]
    assert not meets({**run, "num_finished": 0}, slo)[0]


@pytest.mark.parametrize("args, message", [
    (["--slo", "p99_ttfb_ms=1"], "unknown metric"),
    (["--slo", "p99_ttft_ms=-1"], "> 0, in ms"),
    (["workload.request_rate=3", "--slo", "p99_ttft_ms=1"], "searches it"),
    (["workload.num_requests=3,4", "--slo", "p99_ttft_ms=1"], "only allocator may list several"),
    (["allocator=nope", "--slo", "p99_ttft_ms=1"], "nope"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    code = main([f"results_dir={tmp_path / 'res'}", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "res").exists()


def test_an_slo_broken_at_the_lowest_rate_answers_below(tmp_path, capsys):
    code = main([f"results_dir={tmp_path}", "allocator=orca-pow2", *TINY, "--slo", "p99_ttft_ms=1", "--low", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and "orca-pow2: below 2 req/s" in out
    assert err.strip().endswith("below 2; lower --low") and len(err.strip().splitlines()) == 1


def _grid_limit(tmp_path, allocator: str, rates) -> float:
    """The highest rate of an ascending grid up to which every rate meets the SLO (plain runs)."""
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR

    slo = parse_slo(SLO_TEXT)
    best = None
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for rate in rates:
            cfg = compose(config_name="config", overrides=[*TINY, f"allocator={allocator}", "progress=false",
                                                           f"results_dir={tmp_path / 'grid'}",
                                                           f"workload.request_rate={rate}"])
            if not meets(run(cfg), slo)[0]:
                break
            best = rate
    return best


def _check_against_grid(tmp_path, allocators, tolerance, grids):
    lines: list[str] = []
    answers, folder, _ = capacity([f"allocator={','.join(allocators)}", f"results_dir={tmp_path / 'cap'}", *TINY],
                               SLO_TEXT, low=1.0, high=32.0, tolerance=tolerance, out=lines.append)
    saved = json.loads((folder / "capacity.json").read_text())
    index = [json.loads(line) for line in (tmp_path / "cap" / "index.jsonl").read_text().splitlines()]
    assert len(index) == sum(len(a.probes) for a in answers)  # every probe is a run in the index
    assert [len(a["probes"]) for a in saved["answers"]] == [len(a.probes) for a in answers]
    assert sum(line.startswith("  probe ") for line in lines) == len(index)  # each probe logged
    for answer, grid in zip(answers, grids):
        limit = _grid_limit(tmp_path, answer.label, grid)
        assert answer.failed_at - answer.sustained <= tolerance
        assert abs(limit - answer.sustained) <= tolerance, (answer.label, limit, answer.sustained)
    return answers


def test_capacity_agrees_with_a_grid_scan_one_allocator(tmp_path):
    answers = _check_against_grid(tmp_path, ["orca-pow2"], 1.0, [[1.0, 1.5, 2.0, 2.5]])
    assert answers[0].sustained == 1.0 and answers[0].failed_at == 2.0


@pytest.mark.slow
def test_capacity_agrees_with_a_fine_grid_scan_two_allocators(tmp_path):
    grid = [round(1.0 + 0.25 * i, 2) for i in range(60)]
    answers = _check_against_grid(tmp_path, ["orca-pow2", "paged"], 0.5, [grid, grid])
    assert answers[1].sustained > 2 * answers[0].sustained  # paged sustains more than orca-pow2 here
