"""scripts/bench_vs_nanovllm.py: the skip line, and nano-vllm's files driven by the fake runner."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from kvbench.requests import Request

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_vs_nanovllm", ROOT / "scripts" / "bench_vs_nanovllm.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_vs_nanovllm"] = bench  # dataclasses look their module up
spec.loader.exec_module(bench)
# nano-vllm's files beside the checkout (../shared/peers/nano-vllm), or where KVBENCH_NANOVLLM says
NANO = Path(os.environ.get("KVBENCH_NANOVLLM") or ROOT.parent / "shared" / "peers" / "nano-vllm")


def test_absent_path_skips_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["bench_vs_nanovllm.py", "--nanovllm", str(tmp_path / "none")])
    bench.main()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("skipped: no nano-vllm files under")


def test_nanovllm_runs_the_requests_to_completion():
    if bench.nano_files_missing(NANO):
        pytest.skip("nano-vllm's files are not here")
    pytest.importorskip("xxhash")
    nano = bench.load_nanovllm(NANO)
    assert nano.sequence.Sequence.block_size == bench.BLOCK_SIZE
    outputs = [3, 1, 7, 5]
    requests = [Request(i, list(range(100 * i, 100 * i + 20 + i)), n) for i, n in enumerate(outputs)]
    m = bench.run_nanovllm(nano, requests)
    # one prefill step for all four (84 tokens), then decodes until the longest output is done
    assert m["steps"] == 1 + max(outputs) - 1
    assert m["seq_steps"] == len(outputs) + sum(n - 1 for n in outputs)
    assert m["cpu_s"] >= 0
