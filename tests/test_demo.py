"""`make demo`: it runs every allocator config or says why not, and names rows that coincide."""
from __future__ import annotations

from kvbench.config.errors import CONF_DIR
from kvbench.run.demo import ALLOCATORS, LEFT_OUT, coinciding, why


def test_every_allocator_config_runs_or_is_named_with_a_reason():
    configs = {p.stem for p in (CONF_DIR / "allocator").glob("*.yaml")}
    assert set(ALLOCATORS) | set(LEFT_OUT) == configs
    assert not set(ALLOCATORS) & set(LEFT_OUT)


def _row(label, allocator, throughput, hit=None):
    return {"allocator_label": label, "allocator": allocator, "request_throughput": throughput,
            "mean_batch_size": 10.0, "mem_token_frac": 0.5, "prefix_hit_rate": hit}


def test_identical_rows_are_named_with_their_reason():
    rows = [_row("paged", "paged", 2.0), _row("paged_prefix", "paged_prefix", 2.0, hit=0.0),
            _row("radix", "radix", 2.0, hit=0.0), _row("orca-max", "buddy", 1.0)]
    (group,) = coinciding(rows)
    assert group == ["paged", "paged_prefix", "radix"]
    assert "share a prefix" in why(group, rows)
    assert coinciding([_row("paged", "paged", 2.0), _row("radix", "radix", 2.5, hit=0.3)]) == []


def test_two_prefix_caches_hitting_the_same_blocks_are_explained():
    rows = [{**_row("paged_prefix", "paged_prefix", 2.0, hit=0.12), "block_size": 16},
            {**_row("radix", "radix", 2.0, hit=0.12), "block_size": 16}]
    assert "recomputing its own prompt" in why(coinciding(rows)[0], rows)
