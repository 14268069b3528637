"""The hf backend's host tier: real K/V goes to host memory and back (``kvbench/hf/host_tier.py``),
and greedy outputs still equal transformers' ``generate``. Tiny Llama, float32, CPU."""
from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from allocators import build
from allocators.tiers import TierStack
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.engine.swap_space import HostTierSwap
from kvbench.executors.hf import HFExecutor
from kvbench.requests import Request
from tests.test_hf_executor import MAX_MODEL_LEN, engine_models, greedy, model_cfg, one_thread, reference  # noqa: F401
from tests.hf_helpers import interpreted

NUM_SLOTS = 64  # 16 blocks of 4: one 46-token request at a time evicts the cached blocks of the last


def _requests() -> list[Request]:
    """A shared 24-token prefix, two unrelated requests that push it out of the GPU, then the prefix
    again twice: what the GPU lost must come back from the host tier."""
    rng = np.random.default_rng(11)
    system = rng.integers(0, 256, 24).tolist()
    prompts = [system + rng.integers(0, 256, 6).tolist(), rng.integers(0, 256, 40).tolist(),
               rng.integers(0, 256, 40).tolist(), system + rng.integers(0, 256, 5).tolist(),
               system + rng.integers(0, 256, 9).tolist()]
    return [Request(i, p, 6, 100.0 * i) for i, p in enumerate(prompts)]


def _run(models, requests, block_tokens: int, host_chunks: int, write: str, attention: str = "torch",
         preemption: str = "recompute"):
    alloc = build("paged_prefix", NUM_SLOTS, debug=True, block_size=4)
    tiers = TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=block_tokens,
                      host_bytes=host_chunks * block_tokens, write=write, debug=True)
    tiers.track_copies()
    alloc.attach_tiers(tiers)
    executor = HFExecutor(model_cfg("tiny-llama"), OmegaConf.create({"attention": attention, "threads": None}),
                          num_slots=NUM_SLOTS, block_size=4, device="cpu", seed=0,
                          backend_cfg=OmegaConf.create({}), model=models["tiny-llama"],
                          geometry=model_geometry(model_cfg("tiny-llama")))
    executor.attach_host_tier(host_chunks, block_tokens // 4)
    swap = HostTierSwap(tiers, slot_bytes=1) if preemption == "swap" else None
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN, preemption=preemption),
                    max_steps=500, swap_space=swap)
    return engine.run(requests), alloc, executor


@pytest.mark.parametrize("block_tokens,host_chunks,write", [(4, 64, "through"), (8, 8, "back")])
def test_blocks_back_from_the_host_give_generates_tokens(block_tokens, host_chunks, write, engine_models, reference):
    requests = _requests()
    out, alloc, executor = _run(engine_models, requests, block_tokens, host_chunks, write)
    stats = alloc.stats()
    assert stats["tier_hit_rate_host"] > 0 and executor.host_tier.loaded > 0  # K/V really came back
    assert greedy(out) == reference("tiny-llama", requests)
    assert len(executor.host_tier.place) == len(alloc._tiers.host.held)  # the pool follows the books


def test_swaps_into_the_host_tier_under_pressure_keep_generates_tokens(engine_models, reference):
    """Six requests at once on 16 blocks, each growing to 11: groups are swapped out into the host
    tier (evicting its chunks), come back, and the tokens are generate's."""
    rng = np.random.default_rng(12)
    system = rng.integers(0, 256, 8).tolist()
    requests = [Request(i, system + rng.integers(0, 256, 5).tolist(), 28, 0.0) for i in range(6)]
    out, alloc, executor = _run(engine_models, requests, 4, 24, "through", preemption="swap")
    assert out.swap_out_slots > 0  # (a swap-in skips the positions the prefix cache still holds)
    assert alloc._tiers.host.pinned_bytes == 0  # every swap came back: the tier holds none of it
    assert alloc._tiers.host.evictions > 0 and executor.host_tier.stored > 0
    assert greedy(out) == reference("tiny-llama", requests)


@pytest.mark.slow
def test_the_triton_interpreter_path_reads_the_reloaded_blocks_too(tmp_path):
    """engine.attention=triton under TRITON_INTERPRET=1 (set before triton is imported: a subprocess)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = tmp_path / "triton_offload.py"
    script.write_text(
        "import json\n"
        "from tests.test_hf_offload import _requests, _run\n"
        "from tests.test_hf_executor import build_model, greedy, hf_generate, model_cfg\n"
        "models = {'tiny-llama': build_model(model_cfg('tiny-llama'), seed=0)}\n"
        "requests = _requests()\n"
        "out, alloc, executor = _run(models, requests, 8, 8, 'back', attention='triton')\n"
        "ref = build_model(model_cfg('tiny-llama'), seed=0, attn_implementation='sdpa')\n"
        "exp = {r.request_id: hf_generate(ref, r) for r in requests}\n"
        "print(json.dumps({'got': greedy(out), 'expected': exp, 'loaded': executor.host_tier.loaded}))\n")
    result = interpreted(script, timeout=900)
    assert result["loaded"] > 0 and result["got"] == result["expected"]


def test_a_corrupted_host_copy_changes_the_tokens(engine_models, reference):
    """The control: the loads are what the outputs read (zeroed host K/V give other tokens)."""
    requests = _requests()
    alloc = build("paged_prefix", NUM_SLOTS, debug=True, block_size=4)
    tiers = TierStack(slot_bytes=1, gpu_block_tokens=4, block_tokens=4, host_bytes=64 * 4, debug=True)
    tiers.track_copies()
    alloc.attach_tiers(tiers)
    executor = HFExecutor(model_cfg("tiny-llama"), OmegaConf.create({"attention": "torch", "threads": None}),
                          num_slots=NUM_SLOTS, block_size=4, device="cpu", seed=0,
                          backend_cfg=OmegaConf.create({}), model=engine_models["tiny-llama"],
                          geometry=model_geometry(model_cfg("tiny-llama")))
    executor.attach_host_tier(64, 1)
    stage = executor.host_tier._stage

    def zeroed(key, blocks, offset):
        for host in executor.host_tier.data:
            host.zero_()
        stage(key, blocks, offset)

    executor.host_tier._stage = zeroed
    out = Engine(alloc, executor, SchedulerConfig(max_model_len=MAX_MODEL_LEN), max_steps=500).run(requests)
    assert greedy(out) != reference("tiny-llama", requests)


def test_the_app_runs_offload_on_hf_and_refuses_a_disk_there(tmp_path):
    """offload=host on hf: the pre-check lets it through, the run holds a real host pool whose
    chunks follow the books; a disk tier on hf is one line, exit 2, nothing written."""
    from kvbench.run.lifecycle import run as app_run
    from kvbench.run.precheck import precheck
    from tests.test_hf_executor import composed

    base = ["backend=hf", "model=tiny-llama", "allocator=paged_prefix", "allocator.block_size=4",
            "workload=system_prompts", "workload.base=synthetic", "workload.num_requests=6",
            "workload.system_prompt_lens=[16,24]", "workload.prompt_len=8", "workload.output_len=4",
            "engine.device=cpu", "engine.threads=1", "engine.kv_cache_bytes=65536", "progress=false",
            f"results_dir={tmp_path / 'r'}"]
    error = precheck([*base, "offload=host_disk"])
    assert error is not None and "offload.disk_bytes: backend=hf keeps a host tier only" in error and "\n" not in error
    assert not (tmp_path / "r").exists()
    assert precheck([*base, "offload=host"]) is None
    summary = app_run(composed([*base, "offload=host", "engine.debug=true"]), run_dir=tmp_path / "run")
    assert summary["num_finished"] == 6 and summary["offload"] == "host"
    assert summary["tier_load_s"] is None and summary["tier_hit_rate_total"] >= summary["tier_hit_rate_gpu"]
