"""``workload.max_concurrency``: at most N requests in flight, the next sent when one finishes,
latencies counted from when it is sent (``vllm bench serve --max-concurrency``)."""
from __future__ import annotations

import pytest

from kvbench.run.lifecycle import run
from kvbench.config.errors import ConfigError
from kvbench.config.compose import validate
from tests.engine_helpers import make_requests
from tests.test_app import composed
from tests.test_engine import batches, make_engine


def _run(cap, specs):
    engine, executor = make_engine("paged", 64, knobs={"block_size": 4})
    engine.max_concurrency = cap
    out = engine.run(make_requests(specs))
    return out.requests.sort_values("request_id"), batches(executor)


def test_one_in_flight_sends_each_request_when_the_previous_finishes():
    # 1 s per step: a 2-token request runs its prompt step (token at +1) and one decode (+2)
    requests, steps = _run(1, [(4, 2, 0.0), (4, 2, 0.5), (4, 2, 10.0)])
    assert all(len(step) == 1 for step in steps)  # never two requests in one batch
    assert list(requests["arrival_s"]) == [0.0, 2.0, 10.0]  # r1 waited for r0; r2 came after the gate opened
    assert list(requests["ttft_s"]) == [1.0, 1.0, 1.0]  # counted from the send, as the benchmark client does
    assert list(requests["finish_s"]) == [2.0, 4.0, 12.0]


def test_without_a_cap_the_same_requests_share_batches():
    requests, steps = _run(None, [(4, 2, 0.0), (4, 2, 0.5), (4, 2, 10.0)])
    assert list(requests["arrival_s"]) == [0.0, 0.5, 10.0]
    assert max(len(step) for step in steps) == 2


def test_a_cap_of_two_keeps_order_and_never_exceeds_two_in_flight():
    requests, steps = _run(2, [(4, 3, 0.0)] * 5)
    assert max(len(step) for step in steps) == 2
    assert list(requests["arrival_s"]) == [0.0, 0.0, 3.0, 3.0, 6.0]  # sent in order, two at a time


def test_the_app_records_the_cap_and_holds_it_at_every_step(tmp_path):
    cfg = composed(["workload.num_requests=20", "workload.max_concurrency=3", "progress=false",
                    f"results_dir={tmp_path}", "logger=none"])
    summary = run(cfg, run_dir=tmp_path / "run")
    from kvbench.results.store import load_steps

    steps = load_steps(tmp_path / "run")
    assert summary["max_concurrency"] == 3 and summary["num_finished"] == 20
    assert (steps["num_running"] + steps["num_waiting"] + steps["num_swapped"]).max() == 3


@pytest.mark.parametrize("value", [0, -1, 1.5, "many"])
def test_a_bad_cap_is_a_config_error_naming_the_key(value):
    with pytest.raises(ConfigError, match="workload.max_concurrency"):
        validate(composed([f"workload.max_concurrency={value}"]))
