"""The beyond-the-paper figures draw from a small index of their own experiments, and skip cleanly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("seaborn")

from paper_figs import BEYOND_FIGURES, FIGURES, common  # noqa: E402
from paper_figs.__main__ import main  # noqa: E402

ALLOCS = [("buddy", "max", 16, None), ("buddy", "oracle", 16, None), ("paged", None, 16, None),
          ("paged_prefix", None, 16, None), ("radix", None, 16, None), ("vattention", None, 16, 2 << 20)]


def row(i: int, experiment: str, alloc: tuple, **values) -> dict:
    name, reserve, block, page = alloc
    caching = name in ("paged_prefix", "radix")
    base = {"run_id": f"r{i}", "experiment": experiment, "allocator": name, "reserve": reserve,
            "block_size": block, "page_bytes": page, "model": "llama-3-8b", "workload": "sharegpt",
            "mem_token_frac": 0.5, "mem_reserved_frac": 0.1, "mem_internal_frac": 0.1,
            "mem_external_frac": 0.2 if caching else 0.3, "mem_cached_frac": 0.1 if caching else None,
            "mean_batch_size": 10.0 + i % 7, "request_throughput": 2.0 + i % 3, "mean_ttft_s": 0.5 + i % 4,
            "prefix_hit_rate": 0.3 if caching else None, "prefix_token_hit_rate": 0.25 if caching else None}
    return {**base, **values}


def policy_rows(start: int) -> list[dict]:
    """Rows of the scheduling-policy studies (policy_rate, preempt_cliff, lpm_starvation)."""
    rows, i = [], start
    for experiment in ("policy-rate-sharegpt", "policy-rate-azure"):
        for policy in ("fcfs", "priority", "sjf", "lpm"):
            for rate in (2.0, 4.0, 8.0):
                rows.append(row(i := i + 1, experiment, ALLOCS[2], policy=policy, request_rate=rate,
                                mean_e2e_s=rate * (2 if policy == "fcfs" else 1), p99_e2el_ms=3000.0 * rate,
                                jain_fairness_normalized_latency=0.5, prio0_p99_ttft_s=rate / 2))
    for victim in ("newest", "lowest_priority", "least_computed", "most_blocks"):
        for mode in ("recompute", "swap"):
            for kv in (1e9, 2e9, 4e9):
                rows.append(row(i := i + 1, "preempt-cliff", ALLOCS[2], preemption_victim=victim, preemption=mode,
                                kv_bytes=kv, preempt_lost_tokens=0 if mode == "swap" else int(4e13 / kv),
                                num_preemptions=int(1e12 / kv), mean_e2e_s=1e10 / kv))
    for policy, bound in (("fcfs", None), ("lpm", None), ("lpm", 10.0)):
        for rate in (2.0, 4.0, 8.0):
            rows.append(row(i := i + 1, "lpm-starvation", ALLOCS[4], policy=policy, aging_bound_s=bound,
                            request_rate=rate, max_queue_wait_s=rate * 3,
                            num_waited_over_bound=None if bound is None else 2))
    return rows


def offload_rows(start: int) -> list[dict]:
    """Rows of the KV-tier studies (offload_capacity): host capacity x policy, one with a ceiling."""
    rows, i = [], start
    for experiment, ceiling in (("offload-mooncake", 0.2), ("offload-multiturn", None)):
        for policy in ("lru", "arc", "lfu", "slru"):
            for multiple in (0, 0.5, 1, 2, 4, 8):
                rows.append(row(i := i + 1, experiment, ALLOCS[3], offload_policy=policy, kv_bytes=1e9,
                                offload_host_bytes=multiple * 1e9, trace_reuse_ceiling=ceiling,
                                tier_hit_rate_total=0.05 + 0.01 * multiple, tier_hit_rate_host=0.01 * multiple,
                                p99_ttft_s=2.0 - 0.1 * multiple))
    return rows


@pytest.fixture
def index(tmp_path) -> Path:
    rows, i = [], 0
    for workload in ("sharegpt", "multiturn", "system_prompts(sharegpt,K=4)"):
        for alloc in ALLOCS:
            rows.append(row(i := i + 1, "allocators-2025", alloc, workload=workload))
    for model in ("opt-13b", "llama-3-8b"):
        rows.append(row(i := i + 1, "vattention-pages", ALLOCS[2], model=model))
        for page in (64 << 10, 256 << 10, 2 << 20):
            rows.append(row(i := i + 1, "vattention-pages", ("vattention", None, 16, page), model=model,
                            mem_internal_frac=page / (4 << 20), mean_batch_size=20 - page / (1 << 20)))
    for alloc in ALLOCS[3:5]:
        for block in (1, 4, 16, 64):
            rows.append(row(i := i + 1, "radix-multiturn", (alloc[0], None, block, None), workload="multiturn",
                            prefix_hit_rate=0.5 / block ** 0.2))
    rows += policy_rows(i)
    rows += offload_rows(len(rows))
    path = tmp_path / "index.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("name", BEYOND_FIGURES)
def test_each_beyond_figure_draws_png_and_pdf(name, index, tmp_path, capsys):
    import importlib

    index_df, root = common.load(index)
    paths = importlib.import_module(f"paper_figs.{name}").draw(index_df, tmp_path / "out", root)
    assert sorted(p.name for p in paths) == [f"{name}.pdf", f"{name}.png"]
    assert all(p.stat().st_size > 1_000 for p in paths)
    assert "skipped" not in capsys.readouterr().out


def test_cli_beyond_group_and_skips_without_runs(index, tmp_path, capsys):
    assert main(["beyond", "--index", str(index), "--out", str(tmp_path / "a")]) == 0
    assert f"drawn: {', '.join(BEYOND_FIGURES)}; skipped: -; failed: -" in capsys.readouterr().out
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(row(0, "paper-breakdown", ALLOCS[2])) + "\n")
    assert main(["beyond", "--index", str(empty), "--out", str(tmp_path / "b")]) == 1
    assert f"skipped: {', '.join(BEYOND_FIGURES)}" in capsys.readouterr().out
    assert not set(BEYOND_FIGURES) & set(FIGURES)  # 'all' stays the paper's figures
