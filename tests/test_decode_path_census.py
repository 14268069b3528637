"""scripts/decode_path_census.py: how a scheduled batch is classed."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

from kvbench.batch import SeqChunk

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("decode_path_census", ROOT / "scripts" / "decode_path_census.py")
census = importlib.util.module_from_spec(spec)
sys.modules["decode_path_census"] = census
spec.loader.exec_module(census)


def chunk(tokens: int, sample: bool = True) -> SeqChunk:
    return SeqChunk(1, [7] * tokens, 10, [], [0] * tokens, sample)


def batch(chunks, swap=(), copies=()):
    return SimpleNamespace(chunks=chunks, swap_out=list(swap), swap_in=[], copy_ops=list(copies))


def test_each_class_and_their_precedence():
    sched = SimpleNamespace(preempted_now=False, plain_decodes=2)
    assert census.step_class(sched, batch([chunk(1), chunk(1)])) == "decode"
    assert census.step_class(sched, batch([chunk(1), chunk(1), chunk(1)])) == "other"  # one off the fast path
    assert census.step_class(sched, batch([chunk(1), chunk(5)])) == "prefill"
    assert census.step_class(sched, batch([chunk(1), chunk(1, sample=False)])) == "prefill"
    assert census.step_class(sched, batch([chunk(1), chunk(5)], copies=[object()])) == "swap/copy"
    sched.preempted_now = True
    assert census.step_class(sched, batch([chunk(1), chunk(1)], swap=[object()])) == "preempt"
