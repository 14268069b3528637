"""``kvbench-results --compare`` and ``--export``, and the selection messages around them."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from kvbench.results.naming import granularity
from kvbench.results.cli import main
from kvbench.results.store import write_run


def _run(tmp_path, run_id: str, **summary) -> None:
    row = {"run_id": run_id, "experiment": "cmp", "workload": "sharegpt", "model": "opt-13b", "mem_cached_frac": None, **summary}
    write_run(tmp_path / "runs" / "cmp" / run_id, row, pd.DataFrame(), pd.DataFrame(), tmp_path / "index.jsonl")


@pytest.fixture
def index(tmp_path):
    for rate in (1.0, 2.0):
        _run(tmp_path, f"oracle-{rate}", allocator="buddy", reserve="oracle", block_size=16, request_rate=rate,
             allocator_label="orca-oracle", request_throughput=1.0 * rate, p99_ttft_ms=100.0 * rate)
        _run(tmp_path, f"paged-{rate}", allocator="paged", block_size=16, request_rate=rate,
             allocator_label="paged", request_throughput=1.5 * rate, p99_ttft_ms=31670.0)
    _run(tmp_path, "paged-3", allocator="paged", block_size=16, request_rate=3.0, allocator_label="paged",
         request_throughput=4.0, p99_ttft_ms=50.0)
    return tmp_path / "index.jsonl"


def _main(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_prints_value_and_ratio_to_the_baseline_per_group_of_other_settings(index, capsys):
    code, out, _ = _main(capsys, "--index", str(index), "--compare", "allocator_label", "--baseline", "orca-oracle",
                         "--metrics", "request_throughput,p99_ttft_ms")
    assert code == 0
    blocks = out.strip().split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        "== request_rate=1 ==", "== request_rate=2 ==", "== request_rate=3 (no orca-oracle run here: no ratios) =="]
    rate2 = [line.split() for line in blocks[1].splitlines()[2:]]
    assert rate2[0][:5] == ["orca-oracle", "1", "2", "1.000x", "200"]
    assert rate2[1][:5] == ["paged", "1", "3", "1.500x", "31670"] and rate2[1][5] == "158.350x"
    assert blocks[2].splitlines()[2].split()[3] == "-"  # no baseline: no ratio, not a made-up one


def test_compare_csv_is_one_long_table(index, capsys):
    code, out, _ = _main(capsys, "--index", str(index), "--compare", "allocator_label", "--baseline", "orca-oracle",
                         "--metrics", "request_throughput", "--format", "csv", "--where", "request_rate=1")
    rows = pd.read_csv(__import__("io").StringIO(out))
    assert code == 0 and list(rows["allocator_label"]) == ["orca-oracle", "paged"]
    assert list(rows["request_throughput/base"]) == [1.0, 1.5]


def test_compare_with_an_unknown_baseline_names_the_values(index, capsys):
    code, _, err = _main(capsys, "--index", str(index), "--compare", "allocator_label", "--baseline", "orca-max",
                         "--metrics", "request_throughput")
    assert code == 2 and "orca-max" in err and "orca-oracle, paged" in err and len(err.strip().splitlines()) == 1


def test_markdown_never_prints_an_exponent(index, capsys):
    code, out, _ = _main(capsys, "--index", str(index), "--format", "markdown", "--columns", "allocator_label,p99_ttft_ms")
    assert code == 0 and "31670" in out and "e+0" not in out


def test_sorting_on_an_all_null_column_says_so(index, capsys):
    code, _, err = _main(capsys, "--index", str(index), "--sort=-mem_cached_frac", "--columns", "allocator_label")
    assert code == 0 and "mem_cached_frac is null" in err


def test_the_sweep_placeholder_is_an_error_not_an_empty_selection(index, capsys):
    code, _, err = _main(capsys, "--index", str(index), "--sweep", str(index.parent / "runs" / "cmp" / "<sweep dir>"))
    assert code == 2 and "placeholder" in err and "oracle-1.0" in err  # names the directories that exist


def test_export_json_and_csv_of_a_selection(index, tmp_path, capsys):
    _run(tmp_path, "burst", allocator="paged", block_size=16, request_rate=float("inf"), allocator_label="paged")
    code, out, _ = _main(capsys, "--index", str(index), "--export", "json", "--where", "allocator_label=paged")
    rows = json.loads(out)
    assert code == 0 and [r["run_id"] for r in rows] == ["paged-1.0", "paged-2.0", "paged-3", "burst"]
    assert rows[-1]["request_rate"] is None and rows[-1]["nonfinite"] == "request_rate=inf"
    target = tmp_path / "sel.csv"
    code, _, _ = _main(capsys, "--index", str(index), "--export", "csv", "--where", "request_rate=2", "--output", str(target))
    assert code == 0 and sorted(pd.read_csv(target)["run_id"]) == ["oracle-2.0", "paged-2.0"]


@pytest.mark.parametrize("fields,expected", [
    ({"allocator": "vattention", "block_size": 4, "page_bytes": 2097152, "tokens_per_page": 204}, "2MiB pages=204 tok"),
    ({"allocator": "vattention", "block_size": 16, "page_bytes": 65536, "tokens_per_page": 6}, "64KiB pages=6 tok"),
    ({"allocator": "paged", "block_size": 8}, "8-tok blocks"),
    ({"allocator": "buddy", "block_size": 16, "reserve": "pow2"}, "buddy/pow2"),
    ({"allocator": "contiguous", "block_size": 16, "reserve": "max"}, "region/max"),
])
def test_every_allocator_granularity_in_its_own_terms(fields, expected):
    assert granularity(fields) == expected
