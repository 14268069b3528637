"""The simulator's results are byte-identical to the committed reference (``tests/sim_identity.py``):
a speed-up must not change any summary, steps table or requests table."""
from __future__ import annotations

import pandas as pd
import pytest

from tests.sim_identity import FAST, SLOW, frame_hash, load_reference, run_hashes

REFERENCE = load_reference()


@pytest.mark.parametrize("name", list(FAST))
def test_fast_runs_hash_as_the_reference(name):
    assert run_hashes(FAST[name]) == REFERENCE["fast"][name], \
        f"{name}: results changed (regenerate tests/fixtures/sim_identity.json only for an intended semantic change)"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW))
def test_bigger_runs_hash_as_the_reference(name):
    assert run_hashes(SLOW[name]) == REFERENCE["slow"][name]


def test_the_hash_sees_one_bit_and_the_column_order():
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", None], "c": [[1, 2], [3]]})
    nudged = frame.copy()
    nudged.loc[1, "a"] = 2.0000000000000004  # the next double after 2.0
    assert frame_hash(frame) == frame_hash(frame.copy())
    assert frame_hash(frame) != frame_hash(nudged)
    assert frame_hash(frame) != frame_hash(frame[["b", "a", "c"]])
    assert frame_hash(frame, drop=("b",)) == frame_hash(frame.drop(columns="b"))
