"""KV tiers behind the GPU prefix cache: the tiers' books, lookups that load instead of recompute,
the load cost on the critical path, and bad offload settings (allocators.tiers, kvbench.sim.offload)."""
from __future__ import annotations

import pytest

from allocators import PagedPrefixAllocator
from allocators.paged_prefix import ROOT_HASH
from allocators.tiers import Loads, TierStack
from kvbench.run.precheck import precheck
from kvbench.sim.offload import LINKS, LoadCost


def stack(host_chunks, disk_chunks=0, write="through", block_tokens=4, policy="lru"):
    """Tiers over 4-token GPU blocks of 1 byte per slot: a chunk of ``block_tokens`` is that many bytes."""
    return TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=block_tokens,
                     host_bytes=host_chunks * block_tokens, disk_bytes=disk_chunks * block_tokens,
                     host_policy=policy, disk_policy=policy, write=write, debug=True)


# -- the tiers' books -----------------------------------------------------------------------
def test_write_through_keeps_each_chunk_once_and_bytes_add_up():
    t = stack(host_chunks=3)
    for key in (1, 2, 3, 2, 4):  # 2 again: a hit, not a second copy
        t.computed(key)
    assert set(t.host.held) == {2, 3, 4} and t.host.used_bytes == 12 and t.host.evictions == 1
    assert t.host.policy.order() == [3, 2, 4]  # 1 went first; 2 was touched after 3
    assert t.bytes_moved["gpu_to_host"] == 16  # four distinct chunks written, the repeat free
    t.check_invariants()


def test_write_back_cascades_host_victims_to_disk():
    t = stack(host_chunks=2, disk_chunks=10, write="back")
    t.computed(9)  # write-back stores nothing on compute
    assert not t.host.held
    for key in (1, 2, 3):
        t.gpu_evicted(key)
    assert set(t.host.held) == {2, 3} and set(t.disk.held) == {1}
    assert t.bytes_moved == {"gpu_to_host": 12, "host_to_gpu": 0, "host_to_disk": 4, "disk_to_gpu": 0}
    assert t.where(1) == "disk" and t.where(2) == "host" and t.where(7) is None


def test_write_through_fills_disk_too_and_a_chunk_bigger_than_a_tier_is_never_stored():
    t = stack(host_chunks=1, disk_chunks=3)
    for key in (1, 2):
        t.computed(key)
    assert set(t.host.held) == {2} and set(t.disk.held) == {1, 2}
    tiny = TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=8, host_bytes=7, debug=True)
    tiny.computed(5)
    assert not tiny.host.held and tiny.bytes_moved["gpu_to_host"] == 0


def test_tier_chunk_must_be_a_multiple_of_the_gpu_block():
    with pytest.raises(ValueError, match="not a multiple"):
        stack(host_chunks=2, block_tokens=6)


def test_swapped_kv_shares_the_host_tier_and_is_never_evicted():
    """One pool, one accounting: a swap-out evicts cached chunks (lru order) to fit, its bytes are
    pinned until they come back, and a swap larger than the tier less what is pinned fails."""
    t = stack(host_chunks=4, disk_chunks=10, write="back")  # 16 bytes of host
    for key in (1, 2, 3):
        t.gpu_evicted(key)
    assert t.pin_swap(9)  # 12 cached + 9 > 16: chunks 1 and 2 go (to disk: write-back)
    assert set(t.host.held) == {3} and set(t.disk.held) == {1, 2}
    assert t.host_bytes_by_category() == {"cached": 4, "swap": 9, "free": 3}
    t.gpu_evicted(4)  # 4 + 4 + 9 > 16: chunk 3 goes, the pinned bytes stay
    assert set(t.host.held) == {4} and t.host.pinned_bytes == 9
    t.gpu_evicted(5)  # 4 + 4 + 9 > 16 again: 4 goes
    assert set(t.host.held) == {5}
    assert not t.pin_swap(8)  # 9 + 8 > 16 even with every chunk gone: refused, nothing changed
    assert set(t.host.held) == {5} and t.host.pinned_bytes == 9
    t.unpin_swap(9)
    assert t.host_bytes_by_category() == {"cached": 4, "swap": 0, "free": 12}
    assert t.peak_host_bytes == {"cached": 12, "swap": 9, "total": 13}
    with pytest.raises(ValueError, match="unpin"):
        t.unpin_swap(1)
    t.check_invariants()


def test_host_tier_swap_space_counts_slots_as_bytes():
    from kvbench.engine.swap_space import HostTierSwap, SwapSpace

    own = SwapSpace(10)
    assert own.take(6) and not own.take(5) and own.used_slots == 6
    t = stack(host_chunks=4)  # 16 bytes
    for key in (1, 2, 3, 4):
        t.computed(key)
    swap = HostTierSwap(t, slot_bytes=2)  # 8 slots of room in all
    assert swap.capacity_slots == 8 and swap.take(3)  # 6 bytes: two chunks evicted
    assert t.host.pinned_bytes == 6 and len(t.host.held) == 2
    assert not swap.take(6) and swap.used_slots == 3
    swap.give(3)
    assert t.host.pinned_bytes == 0 and swap.used_slots == 0


# -- the GPU prefix cache with tiers ----------------------------------------------------------
A = list(range(9))  # two full blocks and one token
B = list(range(100, 116))  # four blocks: evicts A's two cached blocks from a four-block GPU pool


def gpu_with(t):
    a = PagedPrefixAllocator(16, block_size=4, debug=True)  # four blocks
    a.attach_tiers(t)
    return a


def run(a, seq_id, tokens):
    r = a.admit(seq_id, tokens, 64)
    assert r.ok
    a.grow(seq_id, len(tokens) - r.num_cached_tokens, tokens[r.num_cached_tokens:])
    a.commit()
    a.free(seq_id)
    return r.num_cached_tokens


@pytest.mark.parametrize("write", ["through", "back"])
def test_a_block_evicted_from_the_gpu_is_loaded_from_the_host_not_recomputed(write):
    t = stack(host_chunks=8, write=write)
    a = gpu_with(t)
    assert run(a, 0, A) == 0
    assert run(a, 1, B) == 0  # A's blocks leave the GPU (write-back stores them now)
    assert a.take_tier_loads().host_bytes == 0
    assert run(a, 2, A) == 8  # both full blocks come from the host
    loads = a.take_tier_loads()
    assert (loads.host_bytes, loads.host_transfers) == (8, 2)
    s = a.stats()
    assert s["tier_hit_rate_gpu"] == 0 and s["tier_hit_rate_host"] == 8 / (8 + 15 + 8)
    assert s["tier_hit_rate_total"] == s["tier_hit_rate_host"] and s["tier_recompute_tokens_saved"] == 8
    assert s["tier_hit_rate_disk"] is None and s["tier_bytes_disk_to_gpu"] is None


def test_a_partial_hit_loads_the_prefix_and_computes_the_rest():
    a = gpu_with(stack(host_chunks=8))
    run(a, 0, A)
    run(a, 1, B)
    prompt = A[:8] + [50, 51, 52, 53, 54, 55]  # blocks 0 and 1 in the host, block 2 new
    r = a.admit(2, prompt, 64)
    assert r.num_cached_tokens == 8
    assert a.take_tier_loads().host_bytes == 8
    a.grow(2, 6, prompt[8:])
    a.commit()
    assert a.stats()["tier_bytes_gpu_to_host"] == 4 * 2 + 4 * 4 + 4 * 3 - 8  # every distinct block once


def test_gpu_then_host_then_disk_and_chunks_of_two_blocks():
    t = stack(host_chunks=1, disk_chunks=8, block_tokens=8)  # one chunk = both of A's blocks
    a = gpu_with(t)
    run(a, 0, A)
    run(a, 1, B)  # host keeps B's second chunk; A's chunk is on disk only
    assert t.where(next(iter(t.disk.held))) == "disk" and len(t.disk.held) == 3
    assert run(a, 2, A) == 8
    loads = a.take_tier_loads()
    assert (loads.host_bytes, loads.disk_bytes, loads.disk_transfers) == (0, 8, 1)
    assert a.stats()["tier_hit_rate_disk"] == 8 / 31


@pytest.mark.parametrize("order,kept,hit", [("head_first", {3, 4}, 0), ("tail_first", {1, 2}, 8)])
def test_store_order_decides_which_end_of_a_prefix_a_full_tier_keeps(order, kept, hit):
    """Four chunks stored at once into a two-chunk host tier: head first keeps the tail, which no
    lookup can reach once the head is gone; tail first keeps the head, and the prefix hits."""
    t = TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=4, host_bytes=8, store_order=order, debug=True)
    a = gpu_with(t)
    assert run(a, 0, B) == 0  # one commit completes B's four blocks
    keys, parent = [], ROOT_HASH
    for i in range(4):
        parent = PagedPrefixAllocator._hash_block(parent, tuple(B[4 * i:4 * i + 4]))
        keys.append(parent)
    held = set(t.host.held)
    assert held == {keys[i - 1] for i in kept} and t.host.evictions == 2
    E = list(range(200, 216))
    assert a.admit(1, E, 64).ok  # grown, never committed: evicts B's GPU blocks, stores nothing
    a.grow(1, 16, E)
    a.free(1)
    assert set(t.host.held) == held
    assert run(a, 2, B) == hit
    if hit:
        assert a.take_tier_loads().host_transfers == 2


# -- the cost of a load ---------------------------------------------------------------------------
def test_overlap_hides_a_load_behind_compute_up_to_the_compute_time_and_blocking_adds_it():
    cost = dict(h2d_rate=1e9, link_latency_s=1e-3, disk_rate=0.5e9, disk_latency_s=1e-2, gpu_count=1)
    loads = Loads(host_bytes=10**9, host_transfers=2)
    overlap, blocking = LoadCost(overlap=True, **cost), LoadCost(overlap=False, **cost)
    assert blocking.seconds(loads) == pytest.approx(1.002)
    assert blocking.critical(loads, 0.5) == pytest.approx(1.002)
    assert overlap.critical(loads, 0.5) == pytest.approx(0.502)
    assert overlap.critical(loads, 3.0) == 0.0
    disk = Loads(disk_bytes=10**9, disk_transfers=1)  # the disk's 0.5 GB/s sets the rate
    assert blocking.seconds(disk) == pytest.approx(2.0 + 1e-2 + 1e-3)


def test_every_link_names_its_source():
    assert {"pcie-gen4-x16", "pcie-gen5-x16", "nvlink-c2c"} <= set(LINKS)
    assert all(link["source"] and link["h2d"] > 0 and link["d2h"] > 0 for link in LINKS.values())


# -- bad input: one line naming the setting ---------------------------------------------------------
PP = "allocator=paged_prefix"


@pytest.mark.parametrize("args,needle", [
    ([PP, "offload=host", "offload.host_gpu_multiple=-1"], "offload.host_gpu_multiple"),
    ([PP, "offload=host", "offload.host_gpu_multiple=abc"], "offload.host_gpu_multiple"),
    ([PP, "offload=host", "offload.host_bytes=-1"], "offload.host_bytes"),
    ([PP, "offload=host", "offload.host_bytes=abc"], "offload.host_bytes"),
    ([PP, "offload=host", "offload.host_bytes=64e9"], "offload.host_bytes and offload.host_gpu_multiple are both set"),
    ([PP, "offload=host_disk", "offload.disk_bytes=nan"], "offload.disk_bytes"),
    ([PP, "offload=host", "offload.block_tokens=24"], "offload.block_tokens must be a multiple of the GPU block"),
    ([PP, "offload=host", "offload.policy=fifo"], "offload.policy must be one of lru, arc, lfu, slru"),
    ([PP, "offload=host_disk", "offload.disk_policy=mru"], "offload.disk_policy must be one of"),
    ([PP, "offload=host", "offload.write=around"], "offload.write must be one of through, back"),
    ([PP, "offload=host", "offload.load=lazy"], "offload.load must be one of blocking, overlap"),
    ([PP, "offload=host", "offload.store_order=middle"], "offload.store_order must be one of head_first, tail_first"),
    ([PP, "offload=host_disk", "offload.host_gpu_multiple=0"], "offload.disk_bytes: a disk tier needs a host tier"),
    (["allocator=radix", "offload=host"], "offload needs an allocator that hashes prefixes (paged_prefix)"),
    (["allocator=paged", "offload=host"], "allocator paged cannot"),
    ([PP, "offload=host", "gpu.offload_link=usb"], "gpu.offload_link must be one of"),
    ([PP, "allocator.eviction=fifo"], "eviction: unknown eviction policy 'fifo'; allowed: lru, arc, lfu, slru"),
    ([PP, "offload=host", "engine.preemption=swap", "engine.swap_space_bytes=1e9"],
     "engine.swap_space_bytes"),
])
def test_bad_offload_settings_are_one_line_naming_the_setting(args, needle, tmp_path):
    error = precheck([*args, f"results_dir={tmp_path / 'r'}"])
    assert error is not None and needle in error, error
    assert "\n" not in error
    assert not (tmp_path / "r").exists()


def test_good_offload_settings_pass_the_precheck(tmp_path):
    for args in ([PP, "offload=host"], [PP, "offload=host_disk", "offload.block_tokens=64", "offload.policy=arc"],
                 [PP, "offload=host", "offload.host_gpu_multiple=0.5", "offload.load=blocking"],
                 [PP, "offload=host", "offload.store_order=tail_first"],
                 [PP, "offload=host", "offload.host_gpu_multiple=null", "offload.host_bytes=64e9"], []):
        assert precheck([*args, f"results_dir={tmp_path / 'r'}"]) is None, args


# -- whole runs (sim) -------------------------------------------------------------------------------
def _run(tmp_path, *overrides):
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run as run_app
    from kvbench.config.errors import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "allocator=paged_prefix", "workload=multiturn", "workload.num_requests=16", "engine.kv_cache_bytes=1.6384e9",
            "logger=none", "progress=false", "metrics.report=false", f"results_dir={tmp_path / 'r'}", *overrides])
    return run_app(cfg)


def test_a_host_tier_recovers_what_the_gpu_evicted_and_blocking_loads_cost_more(tmp_path):
    none = _run(tmp_path)
    # offload=none: the tier columns are there, the host and disk ones null, the GPU rate the prefix cache's
    assert none["offload"] == "none" and none["offload_host_bytes"] == 0 and none["tier_load_s"] is None
    assert none["tier_hit_rate_gpu"] == none["tier_hit_rate_total"] == none["prefix_token_hit_rate"]
    assert none["tier_hit_rate_host"] is None and none["tier_bytes_host_to_gpu"] is None
    overlap = _run(tmp_path, "offload=host", "offload.host_gpu_multiple=8.0")
    blocking = _run(tmp_path, "offload=host", "offload.host_gpu_multiple=8.0", "offload.load=blocking")
    assert overlap["tier_hit_rate_gpu"] == pytest.approx(none["prefix_token_hit_rate"], abs=0.05)
    assert overlap["tier_hit_rate_host"] > 0 and overlap["tier_recompute_tokens_saved"] > 0
    assert overlap["tier_hit_rate_total"] > none["prefix_token_hit_rate"]
    assert overlap["tier_bytes_host_to_gpu"] > 0 and overlap["tier_bytes_disk_to_gpu"] is None
    assert blocking["tier_load_s"] > overlap["tier_load_s"] >= 0
    assert blocking["offload_load"] == "blocking" and overlap["offload_host_bytes"] == 8 * overlap["kv_bytes"]


def test_swap_preemption_uses_the_host_tier_not_its_own_pool(tmp_path):
    """With a tier on, engine.swap_space_bytes is not the limit: a host tier of one chunk (16
    tokens of opt-13b, 16 x 819,200 bytes; a smaller one is refused) holds at most that much swapped
    K/V at once, the other preemptions recompute; a large one takes the swaps and holds their bytes."""
    base = ["engine.preemption=swap", "engine.swap_space_bytes=4e9", "workload=sharegpt",
            "workload.num_requests=24", "engine.debug=true"]
    tiny = _run(tmp_path, *base, "offload=host", "offload.host_gpu_multiple=null", "offload.host_bytes=13107200")
    assert tiny["num_preemptions"] > 0 and 0 < tiny["tier_host_peak_swap_bytes"] <= 13107200
    big = _run(tmp_path, *base, "offload=host", "offload.host_gpu_multiple=2.0")
    assert big["num_preemptions"] > 0 and big["swap_out_slots"] > tiny["swap_out_slots"]
    slot_bytes = big["kv_bytes"] // big["kv_slots"]
    assert big["tier_bytes_swap_out"] == big["swap_out_slots"] * slot_bytes
    assert big["tier_bytes_swap_in"] == big["swap_in_slots"] * slot_bytes
    assert 0 < big["tier_host_peak_swap_bytes"] <= big["tier_host_peak_bytes"] <= big["offload_host_bytes"]
    assert big["tier_host_swap_bytes"] == 0  # every swapped group came back


def test_behind_a_small_gpu_pool_the_tiers_reach_the_trace_ceiling(tmp_path):
    """Four requests far apart on a GPU pool that holds about one request: the GPU alone loses
    what it evicted; a host tier (or host + disk) serves exactly the trace's ceiling."""
    from test_trace_workloads import B, write_mooncake

    rows = [(0, 3 * B + 1, 3, [1, 2, 3, 4]), (60_000, 2 * B + 1, 3, [1, 2, 5]),
            (120_000, 3 * B + 1, 3, [1, 6, 7, 8]), (180_000, 3 * B + 1, 3, [1, 2, 3, 9])]
    path = write_mooncake(tmp_path / "t.jsonl", rows)
    ceiling = (0 + 2 * B + B + 3 * B) / (3 * B + 2 * B + 3 * B + 3 * B)
    base = ["model=llama-3-8b", "gpu=h100-80gb", "workload=mooncake_conversation", f"workload.path={path}",
            "allocator=paged_prefix", "allocator.block_size=16", f"engine.kv_cache_bytes={1600 * 131072}"]
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run as run_app
    from kvbench.config.errors import CONF_DIR

    def run_with(*overrides):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[*base, *overrides, f"results_dir={tmp_path / 'r'}",
                                                           "logger=none", "progress=false", "metrics.report=false"])
        return run_app(cfg)

    gpu_only = run_with()
    assert gpu_only["trace_reuse_ceiling"] == pytest.approx(ceiling)
    assert gpu_only["prefix_token_hit_rate"] < ceiling - 0.1
    host = run_with("offload=host", "offload.host_gpu_multiple=8.0", "engine.debug=true")
    assert host["tier_hit_rate_total"] == pytest.approx(ceiling)
    disk = run_with("offload=host_disk", "offload.host_gpu_multiple=0.4", "offload.disk_bytes=1e12",
                    "offload.block_tokens=512", "engine.debug=true")
    assert disk["tier_hit_rate_total"] == pytest.approx(ceiling) and disk["tier_hit_rate_disk"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("args", [["allocator=paged", "offload=host"], ["allocator=paged_prefix", "offload=host",
                                                                        "offload.policy=fifo"]])
def test_the_command_exits_2_with_one_line_and_writes_nothing(args, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", *args, f"results_dir={tmp_path / 'r'}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "offload" in lines[0], proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "h").exists()


def _steps(tmp_path, summary):
    import pandas as pd

    return pd.read_parquet(tmp_path / "r" / "runs" / summary["experiment"] / summary["run_id"] / "steps.parquet")


MOVED = ("tier_bytes_gpu_to_host", "tier_bytes_host_to_gpu", "tier_bytes_swap_out", "tier_bytes_swap_in")


def test_per_step_tier_columns_add_up_to_the_summary_and_stay_out_of_runs_without_tiers(tmp_path):
    """Steps carry the tiers' bytes held (host cached and swapped, after the step) and moved (in
    the step) only with a tier on; moved bytes sum to the summary's totals, the last row's held
    bytes are its end-of-run figures, and no step holds more than the tier (nor its peak)."""
    base = ["engine.preemption=swap", "engine.swap_space_bytes=4e9", "workload=sharegpt",
            "workload.num_requests=24", "engine.debug=true"]
    none = _steps(tmp_path, _run(tmp_path, *base))
    assert not [c for c in none.columns if c.startswith("tier_")]
    summary = _run(tmp_path, *base, "offload=host", "offload.host_gpu_multiple=2.0")
    steps = _steps(tmp_path, summary)
    assert summary["num_preemptions"] > 0 and summary["tier_bytes_swap_out"] > 0
    assert "tier_disk_cached_bytes" not in steps and "tier_bytes_disk_to_gpu" not in steps
    for key in MOVED:
        assert steps[key].min() >= 0 and int(steps[key].sum()) == summary[key], key
    last = steps.iloc[-1]
    assert last["tier_host_cached_bytes"] == summary["tier_host_used_bytes"]
    assert last["tier_host_swap_bytes"] == summary["tier_host_swap_bytes"] == 0
    held = steps["tier_host_cached_bytes"] + steps["tier_host_swap_bytes"]
    assert held.max() <= summary["tier_host_peak_bytes"] <= summary["offload_host_bytes"]
    assert steps["tier_host_swap_bytes"].max() == summary["tier_host_peak_swap_bytes"] > 0


def test_per_step_bytes_match_the_books_of_a_tier_that_never_evicts(tmp_path):
    """Host and disk large enough to keep every chunk (write-through, each block in at most one
    place per tier, checked each step by engine.debug): after each step each tier holds exactly
    the bytes written to it so far, and what came back from the host is what was loaded."""
    summary = _run(tmp_path, "offload=host_disk", "offload.host_gpu_multiple=64.0", "offload.write=through",
                   "engine.debug=true")
    steps = _steps(tmp_path, summary)
    assert summary["tier_host_evictions"] == summary["tier_disk_evictions"] == 0
    assert summary["tier_bytes_host_to_gpu"] > 0
    assert (steps["tier_bytes_gpu_to_host"].cumsum() == steps["tier_host_cached_bytes"]).all()
    assert (steps["tier_bytes_host_to_disk"].cumsum() == steps["tier_disk_cached_bytes"]).all()
    assert int(steps["tier_bytes_host_to_gpu"].sum()) == summary["tier_bytes_host_to_gpu"]
    assert steps["tier_bytes_disk_to_gpu"].sum() == 0  # the host holds all: nothing read from disk
