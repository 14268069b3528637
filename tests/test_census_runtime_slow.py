"""The runtime census of issue 31, slow part: every process case of ``tests/census_runtime.py``
(sweeps under three launchers, signals, run-dir races, full disks, W&B, absent extras), and
hundreds of signals at random moments (``KVBENCH_SIGNAL_TRIES``, default 300)."""
from __future__ import annotations

import os
import random
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import census_runtime as cr  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = cr.process_cases()

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(CASES))
def test_process_case_gets_its_right_outcome(name, tmp_path):
    result = CASES[name](ROOT, tmp_path)
    if result["outcome"] == "skipped":
        pytest.skip(result["detail"])
    assert result["outcome"] == "right", result


def test_hundreds_of_signals_at_random_moments(tmp_path):
    tries = int(os.environ.get("KVBENCH_SIGNAL_TRIES", "300"))
    rng = random.Random(500)
    plan = [(rng.choice((signal.SIGINT, signal.SIGTERM)), round(rng.uniform(0.0, 6.0), 3)) for _ in range(tries)]

    def one(item):
        number, (sig, delay) = item
        return number, sig, delay, cr.signal_case(ROOT, tmp_path / str(number), sig, delay)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, enumerate(plan)))
    wrong = [(n, signal.Signals(s).name, d, r) for n, s, d, r in results if r["outcome"] != "right"]
    assert not wrong, f"{len(wrong)} of {tries} signals: {wrong[:5]}"
