"""The simulated GPU's KV pool is sized as the modelled vLLM sizes it (issue 53, part 4).

vLLM measures the peak memory of one profiling forward and gives the rest of the
``gpu_memory_utilization`` share to the KV cache. Which forward depends on the version:

- v1 (``system=modern``): ``GPUModelRunner.profile_run`` runs ``max_num_batched_tokens`` tokens
  (vllm/v1/worker/gpu_model_runner.py, ``_dummy_run(self.max_num_tokens)``), over
  ``min(tokens, max_num_seqs)`` requests that the sampler pass reads; without chunked prefill the
  budget is at least ``max_model_len`` (vllm/engine/arg_utils.py, vllm/config/scheduler.py).
- 0.1 (``system=vllm-2023``): ``max_num_seqs`` prompts sharing ``max_num_batched_tokens`` tokens,
  each sampled (vllm/worker/worker.py ``profile_num_available_blocks``).

``_hand_kv`` below is that rule written out again, apart from the code under test, with the
cost model's activation count per token (residual, normed input, attention output, fused QKV and
the MLP's two intermediates; fp32 logits).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.config.spec import model_geometry
from kvbench.sim import cost_model as cm
from kvbench.sim.profiles import load_gpu, load_model

MiB = 1 << 20
DTYPE = {"float16": 2, "bfloat16": 2, "float32": 4}


def _hand_kv(model, gpu, budget: int, seqs: int, chunked: bool, version: str, util: float = 0.9) -> int:
    """vLLM's pool, by hand: usable memory - weights - per GPU (runtime + profiled activations)."""
    if version == "v1":
        tokens = budget if chunked else max(budget, model.max_model_len)
        rows = min(tokens, seqs)
    else:  # 0.1: the configured budget, every one of max_num_seqs prompts sampled
        tokens, rows = budget, seqs
    n = gpu.get("count") or 1
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_size
    per_token = DTYPE[model.dtype] * (3 * model.hidden_size + (qkv + 2 * model.intermediate_size) / n)
    activations = tokens * per_token + rows * model.vocab_size * 4
    usable = n * gpu.memory_bytes * util
    return int(usable - model.num_params * DTYPE[model.dtype] - n * (512 * MiB + int(activations)))


def _model(name: str, max_model_len: int | None = None):
    model = load_model(name)
    return model if max_model_len is None else OmegaConf.merge(model, {"max_model_len": max_model_len})


def _pool(model, gpu, budget: int, seqs: int = 256, chunked: bool = True, profile: str = "vllm-v1") -> int:
    step = cm.profiled_step(int(model.max_model_len), budget, seqs, chunked, profile)
    return cm.kv_cache_bytes(model, gpu, 0.9, step, geometry=model_geometry(model))


def test_gemma3_27b_pool_does_not_depend_on_the_context_under_chunked_prefill():
    """One H100, 2,048-token steps: the profiling forward is 2,048 tokens at 131,072 and 32,768
    context alike (it was max_model_len tokens: 4.84 GB and 18.07 GB)."""
    h100 = load_gpu("h100-80gb")
    native, capped = _model("gemma-3-27b"), _model("gemma-3-27b", 32768)
    assert _pool(native, h100, 2048) == _pool(capped, h100, 2048)
    # by hand: 0.9 x 80 GiB = 77,309,411,328 B; weights 27,008,663,808 x 2; activations 2,048 tokens
    # x 2 x (3 x 5,376 + (32 + 32) x 128 + 2 x 21,504) = 275,775,488 plus 256 rows x 262,208 x 4 B
    # = 268,500,992 of logits; runtime 536,870,912
    expected = 77_309_411_328 - 54_017_327_616 - 536_870_912 - 275_775_488 - 268_500_992
    assert expected == 22_210_936_320
    assert _pool(native, h100, 2048) == expected
    # without chunked prefill vLLM v1 profiles max_model_len tokens: the old numbers
    assert _pool(native, h100, 2048, chunked=False) == 4_837_080_576
    assert _pool(capped, h100, 2048, chunked=False) == 18_074_304_000


CASES = [  # model, context (None: its own), GPU, GPU count
    ("gemma-3-27b", None, "h100-80gb", 1),
    ("gemma-3-27b", 32768, "h100-80gb", 1),
    ("opt-13b", None, "a100-40gb", 1),
    ("llama-3-8b", None, "h100-80gb", 1),
    ("llama-3-70b", None, "h100-80gb", 4),
    ("qwen2.5-0.5b", None, "a100-80gb", 1),
]


@pytest.mark.parametrize("version", ["v1", "0.1"])
@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("budget,seqs", [(512, 256), (2048, 256), (8192, 128), (128, 256)])
@pytest.mark.parametrize("name,context,gpu_name,count", CASES)
def test_pool_is_vllms_formula(name, context, gpu_name, count, budget, seqs, chunked, version):
    model, gpu = _model(name, context), load_gpu(gpu_name, count=count)
    profile = {"v1": "vllm-v1", "0.1": "vllm-0.1"}[version]
    assert _pool(model, gpu, budget, seqs, chunked, profile) == _hand_kv(model, gpu, budget, seqs, chunked, version)


def test_the_profiled_step_of_each_version():
    assert cm.profiled_step(131072, 2048, 256, True, "vllm-v1") == cm.ProfiledStep(2048, 256)
    assert cm.profiled_step(131072, 2048, 256, False, "vllm-v1") == cm.ProfiledStep(131072, 256)
    assert cm.profiled_step(1024, 4096, 256, False, "vllm-v1") == cm.ProfiledStep(4096, 256)
    assert cm.profiled_step(8192, 128, 256, True, "vllm-v1") == cm.ProfiledStep(128, 128)  # one token a request
    assert cm.profiled_step(8192, 2048, 256, False, "vllm-0.1") == cm.ProfiledStep(2048, 256)
    assert cm.profiled_step(2048, 128, 256, False, "vllm-0.1") == cm.ProfiledStep(128, 256)
    with pytest.raises(ValueError, match="system.memory_profile must be one of"):
        cm.profiled_step(2048, memory_profile="vllm-0.2")


def _derived(*overrides: str) -> int:
    """The KV bytes a run derives before its allocator rounds them to its pool."""
    from kvbench.run.prepare import _kv_bytes

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["backend=sim", "logger=none", "progress=false", *overrides])
    return _kv_bytes(cfg, model_geometry(cfg.model))[0]


def test_a_run_sizes_its_pool_from_its_engine_and_system():
    gemma = ["model=gemma-3-27b", "gpu=h100-80gb", "allocator=hybrid"]
    assert _derived(*gemma) == 22_210_936_320
    assert _derived(*gemma, "model.max_model_len=32768") == 22_210_936_320
    assert _derived(*gemma, "engine.max_num_batched_tokens=8192") == 22_210_936_320 - 6144 * 134_656
    llama = ["model=llama-3-8b", "gpu=h100-80gb", "workload=synthetic"]
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-80gb")
    assert _derived(*llama) == _hand_kv(model, gpu, 2048, 256, True, "v1")
    assert _derived(*llama, "engine.chunked_prefill=false") == _hand_kv(model, gpu, 2048, 256, False, "v1")
    # the paper-era system profiles its configured budget, whatever the context
    assert _derived(*llama, "system=vllm-2023") == _hand_kv(model, gpu, 2048, 256, False, "0.1")
    assert _hand_kv(model, gpu, 2048, 256, False, "0.1") > _hand_kv(model, gpu, 2048, 256, False, "v1")


def test_an_unknown_memory_profile_is_one_line_and_exit_2(tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run([str(Path(sys.executable).parent / "kvbench"), "system.memory_profile=vllm-0.2",
                           f"results_dir={results}"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "system.memory_profile must be one of vllm-v1, vllm-0.1" in lines[0], proc.stderr
    assert not results.exists() and not (tmp_path / "outputs").exists()
