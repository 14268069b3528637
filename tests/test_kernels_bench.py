"""The kernel benchmark's --smoke mode: runs on the CPU and writes the full CSV schema."""
from __future__ import annotations

import csv
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from kernels import bench  # noqa: E402


def test_smoke_writes_every_column(tmp_path, capsys):
    out, latency = tmp_path / "kernel_bench.csv", tmp_path / "kernel_latency.csv"
    assert bench.main(["--smoke", "--out", str(out), "--latency-out", str(latency)]) == 0
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == bench.CSV_COLUMNS
        rows = list(reader)
    assert {r["mode"] for r in rows} == {"decode", "prefill"}
    assert {int(r["block_size"]) for r in rows} == {1, 4, 16}
    for r in rows:
        for column in ("time_us", "bytes", "gbps", "copy_gbps", "bw_frac", "tflops", "sdpa_us", "one_block_us",
                       "vs_sdpa", "vs_one_block"):
            assert float(r[column]) > 0, (column, r)
        expected_bytes = 2 * int(r["batch"]) * int(r["context"]) * int(r["num_kv_heads"]) * int(r["head_size"]) * 4 \
            + 2 * int(r["batch"]) * int(r["q_len"]) * int(r["num_heads"]) * int(r["head_size"]) * 4
        assert int(r["bytes"]) == expected_bytes
    decode = [(int(r["block_size"]), int(r["context"]), int(r["batch"]), float(r["time_us"]))
              for r in rows if r["mode"] == "decode"]
    with open(latency, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == bench.LATENCY_COLUMNS
        assert [(int(r["block_size"]), int(r["context_len"]), int(r["batch"]), float(r["latency_us"]))
                for r in reader] == decode
    printed = capsys.readouterr().out
    assert "copy bandwidth" in printed and "mode" in printed and f"wrote {len(rows)} rows" in printed
    assert bench.main(["--report", str(out)]) == 0
    assert "vs one block per sequence" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_full_sweep_needs_cuda(capsys):
    assert bench.main([]) == 2
    assert "needs CUDA" in capsys.readouterr().err
