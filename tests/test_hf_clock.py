"""``engine.clock=virtual`` on the hf backend: real tokens, step times from the sim cost model of the
gpu profile, so the schedule of a run with arrivals does not depend on the machine's load."""
from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf

from kvbench.batch import StepBatch
from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.spec import model_geometry
from kvbench.executors.hf import HFExecutor, virtual_clock
from kvbench.sim.cost_model import CostParams, step_time, summarize
from tests.test_hf_executor import composed

OVERRIDES = ["backend=hf", "model=tiny-llama", "workload=synthetic", "workload.num_requests=6",
             "workload.prompt_len=12", "workload.output_len=5", "workload.request_rate=200", "engine.device=cpu",
             "engine.threads=1", "progress=false", "gpu=a10g"]


def test_virtual_clock_is_reproducible_and_keeps_the_tokens(tmp_path):
    from kvbench.run.lifecycle import run as app_run

    summaries, steps = [], []
    for i, clock in enumerate(["virtual", "virtual", "wall"]):
        cfg = composed(OVERRIDES + [f"engine.clock={clock}", f"results_dir={tmp_path}"])
        summaries.append(app_run(cfg, run_dir=tmp_path / f"run{i}"))
        steps.append(pd.read_parquet(tmp_path / f"run{i}" / "steps.parquet"))
    virtual, again, wall = summaries
    assert virtual["clock"] == again["clock"] == "virtual" and wall["clock"] == "wall"
    assert virtual["gpu_profile"] == "a10g" and wall["gpu_profile"] is None
    # the same schedule to the bit, whatever the machine was doing
    pd.testing.assert_frame_equal(steps[0][["time_s", "step_s", "num_tokens", "batch_size"]],
                                  steps[1][["time_s", "step_s", "num_tokens", "batch_size"]])
    assert virtual["duration_s"] == again["duration_s"] and virtual["mean_ttft_s"] == again["mean_ttft_s"]
    assert virtual["num_finished"] == wall["num_finished"] == 6


def test_virtual_step_time_is_the_cost_models():
    model_cfg = OmegaConf.load(CONF_DIR / "model" / "tiny-llama.yaml")
    gpu = OmegaConf.load(CONF_DIR / "gpu" / "h100-80gb.yaml")
    from kvbench.batch import SeqChunk

    executor = HFExecutor(model_cfg, OmegaConf.create({"attention": "torch", "clock": "virtual"}), num_slots=64,
                          block_size=4, device="cpu", gpu_cfg=gpu, geometry=model_geometry(model_cfg))
    batch = StepBatch([SeqChunk(0, [1, 2, 3, 4, 5], 0, [3, 1], list(range(12, 17)), True, request_id=0)],
                      block_size=4)
    result = executor.execute(batch)
    expected = step_time(CostParams.from_configs(model_cfg, gpu, geometry=model_geometry(model_cfg)), summarize(batch))
    assert result.duration_s == expected["duration_s"] > 0
    assert result.timings["attention_s"] == expected["attention_s"]
    assert set(result.next_tokens) == {0}


def test_clock_errors():
    model_cfg = OmegaConf.load(CONF_DIR / "model" / "tiny-llama.yaml")
    with pytest.raises(ConfigError, match="needs a gpu profile"):
        HFExecutor(model_cfg, OmegaConf.create({"clock": "virtual"}), num_slots=64, block_size=4, device="cpu",
                   geometry=model_geometry(model_cfg))
    unknown = model_cfg.copy()
    unknown.family = "bloom"
    with pytest.raises(ConfigError, match="engine.clock=virtual: model.family must be one of"):
        virtual_clock(unknown, OmegaConf.create({"clock": "virtual"}), OmegaConf.load(CONF_DIR / "gpu" / "h100-80gb.yaml"),
                      geometry=model_geometry(unknown))
    from kvbench.config.compose import validate

    with pytest.raises(ConfigError, match="engine.clock must be one of wall, virtual"):
        validate(composed(["backend=hf", "model=tiny-llama", "engine.clock=sim"]))


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe", "phi", "gpt2", "gpt_neox", "starcoder2"])
def test_virtual_clock_counts_moe_and_two_matrix_families(family):
    """MoE: the FLOPs of the experts active per token, the bytes of every expert; two-matrix MLPs as
    OPT's. A counted family's parameters are the cost model's own."""
    from kvbench.hf.cost_view import cost_view

    gpu = OmegaConf.load(CONF_DIR / "gpu" / "h100-80gb.yaml")
    llama = OmegaConf.load(CONF_DIR / "model" / "tiny-llama.yaml")
    geometry = model_geometry(llama)
    assert (virtual_clock(llama, OmegaConf.create({"clock": "virtual"}), gpu, geometry=geometry)
            == CostParams.from_configs(llama, gpu, geometry=geometry))
    cfg = llama.copy()
    cfg.family = family
    cfg.update(num_local_experts=8, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
               shared_expert_intermediate_size=64)
    params = virtual_clock(cfg, OmegaConf.create({"clock": "virtual"}), gpu, geometry=model_geometry(cfg))
    h, layers, ffn, vocab = 64, 2, 128, 256
    attention = 2 * h * 64 + 2 * h * 32  # q, o: 4 heads x 16; k, v: 2 heads x 16
    if family in ("phi", "gpt2", "gpt_neox", "starcoder2"):
        assert cost_view(cfg)[0].family == "opt"
        assert params.dense_flops_per_token == 2.0 * layers * (attention + 2 * h * ffn)
        return
    active, every = {"mixtral": (2 * ffn, 8 * ffn), "qwen2_moe": (2 * 32 + 64, 8 * 32 + 64),
                     "qwen3_moe": (2 * 32, 8 * 32)}[family]
    assert params.dense_flops_per_token == 2.0 * layers * (attention + 3 * h * active)
    assert params.weight_read_bytes == 4.0 * (layers * (attention + 3 * h * every + h * 8) + vocab * h)
