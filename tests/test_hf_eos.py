"""``workload.ignore_eos=false``: a sample stops at EOS and its blocks are freed; tokens equal
generate's with the same EOS; draws do not depend on other samples stopping."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
from omegaconf import OmegaConf

from allocators import build
from kvbench.config.errors import ConfigError
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.executors.hf import HFExecutor
from kvbench.hf.model import build_model
from tests.engine_helpers import make_requests
from tests.test_hf_executor import composed, hf_generate, model_cfg

SPECS = [(5, 19), (23, 14), (3, 20), (12, 17)]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return build_model(model_cfg("tiny-llama"), seed=0)


def run(model, requests, stop=(), backend=None, num_slots=256):
    alloc = build("paged", num_slots, block_size=4, debug=True)
    executor = HFExecutor(model_cfg("tiny-llama"), OmegaConf.create({"attention": "torch"}), num_slots=num_slots,
                          block_size=4, device="cpu", backend_cfg=OmegaConf.create(backend or {}), model=model,
                          geometry=model_geometry(model_cfg("tiny-llama")))
    cfg = SchedulerConfig(max_model_len=256, max_num_batched_tokens=16, stop_token_ids=tuple(stop))
    return Engine(alloc, executor, cfg, max_steps=3000).run(requests)


def truncate(tokens: list[int], stop: int) -> list[int]:
    return tokens[: tokens.index(stop) + 1] if stop in tokens else tokens


def test_greedy_stops_where_generate_stops(tiny):
    requests = make_requests(SPECS, vocab_size=256, seed=21)
    full = run(tiny, requests)
    eos = Counter(t for samples in full.outputs.values() for t in samples[0][1:]).most_common(1)[0][0]
    stopped = run(tiny, requests, stop=[eos])
    reference = build_model(model_cfg("tiny-llama"), seed=0, attn_implementation="sdpa")
    for r in requests:
        expected = hf_generate(reference, r, eos_token_id=eos)  # generate ends with the EOS it sampled
        assert stopped.outputs[r.request_id][0] == expected == truncate(full.outputs[r.request_id][0], eos)
    shorter = sum(len(s[0]) for s in stopped.outputs.values())
    assert shorter < sum(r.output_len for r in requests)
    assert stopped.summary["output_token_throughput"] * stopped.summary["duration_s"] == pytest.approx(shorter)
    assert stopped.requests["generated_tokens"].sum() == shorter


def test_parallel_samples_stop_independently_and_free_their_blocks(tiny):
    sampling = {"temperature": 1.0}
    requests = make_requests([(6, 24, 0.0, 4), (15, 20, 0.0, 4)], vocab_size=256, seed=22)
    full = run(tiny, requests, backend=sampling)
    eos = Counter(t for samples in full.outputs.values() for s in samples for t in s[2:]).most_common(1)[0][0]
    stopped = run(tiny, requests, stop=[eos], backend=sampling)
    lengths = []
    for rid, samples in full.outputs.items():
        got = stopped.outputs[rid]
        assert got == [truncate(s, eos) for s in samples]  # counter-based draws: the same prefixes
        lengths += [len(s) for s in got]
    assert min(lengths) < max(lengths)  # some samples stopped while their siblings ran on
    # blocks of stopped samples went back: the pool held fewer tokens over the run
    assert stopped.steps["token_slots"].sum() < full.steps["token_slots"].sum()


def test_app_ignore_eos(tmp_path):
    from kvbench.run.lifecycle import run as app_run

    base = ["backend=hf", "model=tiny-llama", "workload=synthetic", "workload.num_requests=4",
            "workload.prompt_len=6", "workload.output_len=30", "engine.device=cpu", "engine.threads=1",
            f"results_dir={tmp_path}", "progress=false", "+model.init_std=0.2"]
    with pytest.raises(ConfigError, match="names no EOS token"):
        app_run(composed(base + ["workload.ignore_eos=false"]))
    with pytest.raises(ConfigError, match="not supported with beam search"):
        app_run(composed(base + ["workload.ignore_eos=false", "workload.beam_width=2", "+model.eos_token_id=3"]))
    assert not any(tmp_path.iterdir())
    kept = app_run(composed(base), run_dir=tmp_path / "a")
    eos = app_run(composed(base + ["workload.ignore_eos=false", "+model.eos_token_id=3"]), run_dir=tmp_path / "b")
    assert kept["ignore_eos"] is True and eos["ignore_eos"] is False
    assert kept["num_finished"] == eos["num_finished"] == 4
    # sim: no token is EOS; the workload's output lengths are the stops
    sim = ["backend=sim", "model=tiny-llama", "workload=synthetic", "workload.num_requests=4", f"results_dir={tmp_path}",
           "progress=false"]
    a = app_run(composed(sim), run_dir=tmp_path / "c")
    b = app_run(composed(sim + ["workload.ignore_eos=false"]), run_dir=tmp_path / "d")
    assert a["duration_s"] == b["duration_s"] and a["output_token_throughput"] == b["output_token_throughput"]
