"""The production traces: replay timing, the hash-to-token mapping, the accounting, bad input."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvbench.workloads import WorkloadError, build_workload
from kvbench.workloads.mooncake import TRACE_BLOCK, reuse_ceiling
from kvbench.workloads.traces import interarrival_cv, open_trace_text

VOCAB = 128_256
B = TRACE_BLOCK


def build(max_model_len: int = 32768, **cfg):
    return build_workload(cfg, vocab_size=VOCAB, max_model_len=max_model_len, tokenizer_name=None)


def azure_times(name: str) -> np.ndarray:
    text, _ = open_trace_text(None, f"{name}_2023.csv.gz")
    return np.array([float(row["arrived_at"]) for row in csv.DictReader(io.StringIO(text))])


def write_mooncake(path: Path, rows: list[tuple[int, int, int, list[int]]]) -> Path:
    """rows of (timestamp ms, input_length, output_length, hash_ids)."""
    lines = [json.dumps({"timestamp": t, "input_length": p, "output_length": o, "hash_ids": h}) for t, p, o, h in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


# --- replay timing --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["azure_conv", "azure_code"])
def test_arrivals_are_the_trace_window_scaled(name):
    times = azure_times(name)
    start, duration, scale = 600.0, 120.0, 0.25
    w = build(name=name, start_s=start, duration_s=duration, time_scale=scale)
    kept = times[(times >= start) & (times < start + duration)]
    arrivals = np.array([r.arrival_s for r in w.requests])
    assert len(w.requests) == kept.size > 100
    np.testing.assert_allclose(arrivals, (kept - kept[0]) * scale, rtol=0, atol=1e-9)
    assert w.request_rate == pytest.approx((kept.size - 1) / (kept[-1] - kept[0]) / scale)
    # the burst shape is the trace's: the CV of the gaps does not change with the time scale
    assert w.meta["arrival_cv"] == pytest.approx(interarrival_cv(kept), rel=1e-9)


def test_target_rate_picks_the_time_scale_and_num_requests_caps_the_window():
    w = build(name="azure_conv", duration_s=300, target_rate=40.0)
    assert w.request_rate == pytest.approx(40.0)
    assert w.meta["time_scale"] < 1.0
    capped = build(name="azure_conv", duration_s=300, num_requests=50)
    assert len(capped.requests) == 50
    assert [r.arrival_s for r in capped.requests] == [r.arrival_s for r in build(
        name="azure_conv", duration_s=300).requests[:50]]


def test_mooncake_arrivals_come_from_the_millisecond_timestamps(tmp_path):
    path = write_mooncake(tmp_path / "t.jsonl", [(1000, 600, 5, [1, 2]), (1500, 600, 5, [1, 3]),
                                                 (4000, 100, 5, [4])])
    w = build(name="mooncake_conversation", path=str(path), time_scale=2.0)
    assert [r.arrival_s for r in w.requests] == [0.0, 1.0, 6.0]
    late = build(name="mooncake_conversation", path=str(path), start_s=0.5)
    assert [r.arrival_s for r in late.requests] == [0.0, 2.5]


# --- hash ids to token ids ------------------------------------------------------------------------


def test_two_requests_share_exactly_their_common_leading_hash_ids(tmp_path):
    rows = [(0, 3 * B, 4, [7, 8, 9]),          # a
            (10, 3 * B + 100, 4, [7, 8, 11, 12]),  # shares two blocks with a
            (20, 2 * B, 4, [7, 13]),           # shares one
            (30, 2 * B, 4, [20, 8]),           # hash 8 at the same position but another first block
            (40, 2 * B, 4, [8, 7]),            # hash 7 and 8 at other positions: nothing shared
            (50, B + 10, 4, [7, 8])]           # a prefix of a, cut inside its second block
    w = build(name="mooncake_conversation", path=str(write_mooncake(tmp_path / "t.jsonl", rows)))
    p = [r.prompt_ids for r in w.requests]
    assert [len(x) for x in p] == [r[1] for r in rows]
    assert common_prefix(p[0], p[1]) == 2 * B
    assert common_prefix(p[0], p[2]) == common_prefix(p[1], p[2]) == B
    assert common_prefix(p[0], p[3]) == 0 and p[3][B:] == p[0][B:2 * B]  # same (position, hash): same ids
    assert common_prefix(p[0], p[4]) == 0 and p[4][:B] != p[0][B:2 * B]  # same hash elsewhere: other ids
    assert p[5] == p[0][:B + 10]
    assert all(0 <= t < VOCAB for x in p for t in x)
    assert build(name="mooncake_conversation", path=str(tmp_path / "t.jsonl")).requests[1].prompt_ids == p[1]
    assert build(name="mooncake_conversation", path=str(tmp_path / "t.jsonl"), seed=1).requests[1].prompt_ids != p[1]


def test_the_shipped_conversation_trace_maps_its_shared_first_block_to_equal_ids():
    w = build(name="mooncake_conversation", duration_s=2)
    assert len(w.requests) >= 3
    first = {tuple(r.prompt_ids[:B]) for r in w.requests}
    assert len(first) == 1  # the trace's hash id 0 opens every prompt of the window
    assert common_prefix(w.requests[0].prompt_ids, w.requests[1].prompt_ids) == B


# --- accounting -----------------------------------------------------------------------------------


def test_reuse_ceiling_counts_leading_blocks_whose_prefix_came_before():
    hashes = [[1, 2, 3], [1, 2, 4], [9, 2, 3], [1, 2, 3]]
    lens = [3 * B, 3 * B, 3 * B, 3 * B - 5]
    # request 2: 2 blocks; request 3: block 2 at its position, but after another first block: 0;
    # request 4: all three, less its last token
    assert reuse_ceiling(hashes, lens) == pytest.approx((2 * B + 3 * B - 6) / (sum(lens) - 4))
    assert reuse_ceiling([[5]], [1]) is None  # a one-token prompt can hit nothing


def test_refused_and_clipped_requests_are_counted(tmp_path):
    rows = [(0, 2 * B, 10, [1, 2]), (1, 4 * B, 10, [1, 3, 4, 5]), (2, B, 10, [1])]
    path = str(write_mooncake(tmp_path / "t.jsonl", rows))
    refused = build(max_model_len=3 * B, name="mooncake_conversation", path=path)
    assert [r.prompt_len for r in refused.requests] == [2 * B, B]
    assert refused.meta["num_refused_overlong"] == 1 and refused.meta["overlong"] == "refuse"
    clipped = build(max_model_len=3 * B, name="mooncake_conversation", path=path, overlong="clip")
    assert [r.prompt_len for r in clipped.requests] == [2 * B, 3 * B - 1, B]
    assert [r.output_len for r in clipped.requests] == [10, 1, 10]
    assert clipped.meta["clipped_to_context"] == 1 and clipped.meta["num_refused_overlong"] == 0
    # the cut prompt keeps its leading blocks
    assert common_prefix(clipped.requests[0].prompt_ids, clipped.requests[1].prompt_ids) == B


def test_an_idle_cache_hits_exactly_the_trace_ceiling(tmp_path):
    """Requests far apart, a pool that holds everything: paged_prefix and radix hit the ceiling."""
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR

    rows = [(0, 3 * B + 1, 3, [1, 2, 3, 4]), (60_000, 2 * B + 1, 3, [1, 2, 5]),
            (120_000, 3 * B + 1, 3, [1, 6, 7, 8]), (180_000, 3 * B + 1, 3, [1, 2, 3, 9])]
    path = write_mooncake(tmp_path / "t.jsonl", rows)
    for allocator, block in (("paged_prefix", 512), ("radix", 64), ("paged", 16)):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "model=llama-3-8b", "gpu=h100-80gb", "workload=mooncake_conversation", f"workload.path={path}",
                f"allocator={allocator}", f"allocator.block_size={block}", f"results_dir={tmp_path / 'r'}",
                "logger=none", "progress=false", "metrics.report=false"])
        summary = run(cfg)
        ceiling = (0 + 2 * B + B + 3 * B) / (3 * B + 2 * B + 3 * B + 3 * B)
        assert summary["trace_reuse_ceiling"] == pytest.approx(ceiling)
        assert summary["num_finished"] == 4 and summary["num_refused_overlong"] == 0
        assert summary["arrival_cv"] == pytest.approx(0.0, abs=1e-12)
        if allocator == "paged":
            assert summary["prefix_token_hit_rate"] is None
        else:
            assert summary["prefix_token_hit_rate"] == pytest.approx(ceiling)


def test_arxiv_lengths_are_drawn_from_the_table_and_arrive_poisson():
    w = build(max_model_len=3000, name="arxiv_summarization", num_requests=400, request_rate=2.0)
    lens = np.array([r.prompt_len + r.output_len for r in w.requests])
    assert len(w.requests) == 400 and lens.max() <= 3000 and lens.mean() > 1500
    assert w.meta["pairs_over_context"] > 10_000  # the table's prompts are long: most exceed 3,000 tokens
    cv = interarrival_cv([r.arrival_s for r in w.requests])
    assert 0.8 < cv < 1.2  # Poisson gaps


# --- bad input ------------------------------------------------------------------------------------


def test_bad_trace_files_fail_in_one_line(tmp_path):
    good = [(0, B, 4, [1]), (5, B, 4, [2])]
    torn = write_mooncake(tmp_path / "torn.jsonl", good)
    torn.write_text(torn.read_text()[:-12])
    packed = tmp_path / "torn.jsonl.gz"
    packed.write_bytes(gzip.compress(write_mooncake(tmp_path / "g.jsonl", good).read_bytes())[:-9])
    azure_csv = tmp_path / "azure.csv"
    azure_csv.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n1.0,10\n")
    bad_hashes = write_mooncake(tmp_path / "h.jsonl", [(0, 2 * B, 4, [1])])
    backwards = write_mooncake(tmp_path / "b.jsonl", [(5, B, 4, [1]), (0, B, 4, [2])])
    cases = [
        (dict(name="azure_conv", path=str(tmp_path / "none.csv")), "no such file"),
        (dict(name="mooncake_conversation", path=str(torn)), "torn or bad JSON at line 2"),
        (dict(name="mooncake_conversation", path=str(packed)), "torn or broken gzip"),
        (dict(name="azure_code", path=str(azure_csv)), "torn or bad row at line 3"),
        (dict(name="mooncake_synthetic", path=str(azure_csv)), "not a JSON-lines trace at line 1"),
        (dict(name="azure_conv", path=str(torn)), "not this trace: no column 'arrived_at'"),
        (dict(name="arxiv_summarization", path=str(azure_csv)), "torn or bad row"),
        (dict(name="mooncake_conversation", path=str(bad_hashes)), "expected one integer per 512-token block"),
        (dict(name="mooncake_conversation", path=str(backwards)), "arrival times go backwards"),
    ]
    for cfg, needle in cases:
        with pytest.raises(WorkloadError, match=needle) as info:
            build(**cfg)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize(("cfg", "needle"), [
    (dict(name="azure_conv", start_s=4000.0), r"workload.start_s: the window \[4000, inf\) s holds no request"),
    (dict(name="azure_code", start_s=10.0, duration_s=0.001), "holds no request"),
    (dict(name="azure_conv", time_scale=0), "workload.time_scale: must be > 0"),
    (dict(name="mooncake_conversation", time_scale=-1.0), "workload.time_scale: must be > 0"),
    (dict(name="azure_conv", time_scale=0.5, target_rate=3.0), "workload.time_scale: must stay 1.0"),
    (dict(name="azure_conv", overlong="drop"), "workload.overlong: must be one of refuse, clip"),
    (dict(name="azure_conv", request_rate=3.0), "workload.request_rate: not a knob of workload azure_conv"),
    (dict(name="mooncake_conversation", duration_s=10, max_model_len=256), "are longer than the model"),
])
def test_bad_knobs_fail_in_one_line(cfg, needle):
    with pytest.raises(WorkloadError, match=needle):
        build(**cfg)


@pytest.mark.parametrize("override,needle", [
    ("workload.time_scale=0", "workload.time_scale"),
    ("workload.start_s=99999", "workload.start_s"),
    ("model.max_model_len=256", "longer than the model"),
])
def test_the_app_exits_2_and_writes_nothing(tmp_path, override, needle):
    from test_app import kvbench

    proc = kvbench("workload=mooncake_conversation", "workload.duration_s=5", override,
                   f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("kvbench: error:")
    assert not (tmp_path / "r").exists() and not (tmp_path / "outputs").exists()


def test_a_window_at_one_instant_has_no_rate_or_cv_and_stays_json():
    w = build(name="mooncake_conversation", duration_s=0.001)  # the trace's first requests share timestamp 0
    assert len(w.requests) >= 2 and math.isinf(w.request_rate) and w.meta["arrival_cv"] is None
    json.dumps(w.meta, allow_nan=False)


# --- figures --------------------------------------------------------------------------------------


def figure_index(path: Path) -> Path:
    rows, i = [], 0
    allocs = [("buddy", "max", 16, None), ("buddy", "oracle", 16, None), ("paged", None, 16, None),
              ("paged_prefix", None, 16, None), ("radix", None, 16, None), ("vattention", None, 16, 2 << 20)]

    def row(experiment: str, allocator: str, reserve, block, page, **values) -> dict:
        nonlocal i
        i += 1
        caching = allocator in ("paged_prefix", "radix")
        return {"run_id": f"r{i}", "experiment": experiment, "allocator": allocator, "reserve": reserve,
                "block_size": block, "page_bytes": page, "model": "llama-3-8b", "mem_token_frac": 0.5,
                "mem_reserved_frac": 0.1, "mem_internal_frac": 0.1, "mem_external_frac": 0.2,
                "mem_cached_frac": 0.1 if caching else None, "mean_batch_size": 10.0 + i % 5,
                "request_throughput": 2.0, "mean_ttft_s": 0.5 + i % 3, "p99_ttft_s": 1.0 + i % 4,
                "request_goodput": 1.5, "num_preemptions": i % 3, "kv_bytes": 8 << 30,
                "prefix_token_hit_rate": 0.2 if caching else None, "trace_reuse_ceiling": 0.3,
                "mean_prompt_len": 9000.0, **values}

    for workload in ("azure_conv", "azure_code"):
        for rate in (4.0, 16.0, 64.0):
            rows += [row("traces-azure", *a, workload=workload, request_rate=rate) for a in allocs]
    for pool in (8 << 30, 64 << 30):
        rows.append(row("traces-mooncake-prefix", "paged", None, 16, None, kv_bytes=pool,
                        workload="mooncake_conversation"))
        for allocator in ("paged_prefix", "radix"):
            rows += [row("traces-mooncake-prefix", allocator, None, b, None, kv_bytes=pool,
                         workload="mooncake_conversation") for b in (16, 64, 512)]
    for workload in ("arxiv_summarization", "mooncake_conversation"):
        rows.append(row("traces-long-prompts", "paged", None, 16, None, workload=workload))
        rows += [row("traces-long-prompts", "vattention", None, 16, p, workload=workload,
                     mem_internal_frac=p / (8 << 20)) for p in (64 << 10, 2 << 20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_trace_figures_draw_from_their_experiments_and_skip_without(tmp_path, capsys):
    pytest.importorskip("seaborn")
    from paper_figs import TRACE_FIGURES
    from paper_figs.__main__ import main

    index = figure_index(tmp_path / "index.jsonl")
    assert main(["traces", "--index", str(index), "--out", str(tmp_path / "out")]) == 0
    assert f"drawn: {', '.join(TRACE_FIGURES)}; skipped: -; failed: -" in capsys.readouterr().out
    assert all((tmp_path / "out" / f"{name}.png").stat().st_size > 1_000 for name in TRACE_FIGURES)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"run_id": "x", "experiment": "paper-breakdown", "allocator": "paged"}) + "\n")
    assert main(["traces", "--index", str(other), "--out", str(tmp_path / "b")]) == 1
