"""The simulated executor and its cost model: closed-form checks, configs, determinism, speed."""
from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from allocators.base import CopyOp
from kvbench.batch import SeqChunk, StepBatch, SwapOp
from kvbench.config.spec import model_geometry
from kvbench.executors import build_executor
from kvbench.executors.sim import SimExecutor
from kvbench.geometry import KVGeometry
from kvbench.sim import allreduce
from kvbench.sim import cost_model as cm
from kvbench.sim.profiles import CONF_DIR, available, load_gpu, load_model

MODEL_FIELDS = {
    "name", "family", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_size",
    "intermediate_size", "vocab_size", "max_model_len", "dtype", "num_params", "load", "path", "tokenizer",
}
OPTIONAL_MODEL_FIELDS = {  # read by the hf backend (kvbench.hf.model, kvbench.geometry)
    "tie_word_embeddings", "rope_theta", "rms_norm_eps", "hidden_activation", "query_pre_attn_scalar",
    "attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "layer_types", "eos_token_id",
    "attention_chunk_size", "state_bytes_per_layer", "full_num_kv_heads", "full_head_size",  # kvbench.layer_groups
}
# mixed models whose num_params is the published total of a mixture of experts (or of Mamba
# layers): the dense count from their active FFN width does not reach it
PUBLISHED_TOTALS = {"gpt-oss-120b", "gpt-oss-20b", "llama-4-scout", "qwen3-next-80b-a3b", "jamba-1.5-mini",
                    "falcon-h1-34b"}
GPU_FIELDS = {
    "name", "memory_bytes", "peak_flops", "peak_flops_fp32", "mem_bandwidth",
    "interconnect_bandwidth", "host_bandwidth", "count",
}
TIED_EMBEDDINGS = {"smollm2-135m": True, "qwen2.5-0.5b": True, "llama-3.2-1b": True,  # Llama-7B/13B/3-8B do not
                   "gemma-2-2b": True, "gemma-3-27b": True}


def decode_chunk(seq_id: int, ctx: int, bs: int, sample: bool = True, k: int = 0) -> SeqChunk:
    nblocks = -(-ctx // bs)
    return SeqChunk(seq_id, [1], ctx - 1, list(range(nblocks)), [ctx - 1], sample, num_logprobs=k)


def prefill_chunk(seq_id: int, q: int, bs: int, start: int = 0) -> SeqChunk:
    ctx = start + q
    return SeqChunk(seq_id, [1] * q, start, list(range(-(-ctx // bs))), list(range(start, ctx)), True)


def times(model, gpu, chunks, bs=16, **ops):
    return cm.batch_time(model, gpu, StepBatch(chunks, bs, **ops), geometry=model_geometry(model))


def no_gather(gpu):
    return OmegaConf.merge(gpu, {"gather_half_bytes": 0.0})


@pytest.fixture(scope="module")
def opt13b():
    return load_model("opt-13b")


@pytest.fixture(scope="module")
def a100():
    return load_gpu("a100-40gb")


# -- configs ------------------------------------------------------------------------------
def test_every_config_loads_with_its_fields():
    assert {"a100-40gb", "a100-80gb", "h100-80gb", "h200", "a10g"} <= set(available("gpu"))
    assert {"opt-125m", "opt-13b", "opt-66b", "opt-175b", "llama-7b", "llama-13b", "llama-3-8b",
            "smollm2-135m", "tiny-llama", "tiny-opt"} <= set(available("model"))
    for name in available("gpu"):
        cfg = OmegaConf.load(CONF_DIR / "gpu" / f"{name}.yaml")
        assert GPU_FIELDS <= set(cfg), name
        assert cfg.name == name and cfg.count == 1
        assert all(cfg[k] > 0 for k in GPU_FIELDS - {"name"})
    for name in available("model"):
        cfg = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        assert MODEL_FIELDS <= set(cfg) <= MODEL_FIELDS | OPTIONAL_MODEL_FIELDS, name
        assert cfg.name == name and cfg.family in cm.FAMILIES and cfg.load in ("dummy", "pretrained")
        assert cfg.num_heads * cfg.head_size == cfg.hidden_size or cfg.family.startswith("gemma") or name in PUBLISHED_TOTALS
        assert cfg.num_heads % cfg.num_kv_heads == 0
        cm.CostParams.from_configs(cfg, load_gpu("h200"), geometry=model_geometry(cfg))  # every model has a cost model


def test_num_params_match_the_architecture():
    for name in available("model"):
        if name in PUBLISHED_TOTALS:
            continue
        cfg = load_model(name)
        counted = cm.count_params(cfg, tied_embeddings=TIED_EMBEDDINGS.get(name))
        assert abs(cfg.num_params - counted) <= 0.01 * counted, name
    # published totals
    assert cm.count_params(load_model("opt-125m")) == 125_239_296
    assert cm.count_params(load_model("llama-7b")) == 6_738_415_616
    assert cm.count_params(load_model("llama-3-8b")) == 8_030_261_248
    assert cm.count_params(load_model("smollm2-135m"), tied_embeddings=True) == 134_515_008


def test_gpu_count_override():
    assert load_gpu("a100-80gb", count=4).count == 4
    with pytest.raises(ValueError, match="gpu must be one of"):
        load_gpu("v100")


# -- KV memory ----------------------------------------------------------------------------
def test_kv_cache_bytes_opt13b_a100_40gb_about_12gb(opt13b, a100):
    kv = cm.kv_cache_bytes(opt13b, a100, geometry=model_geometry(opt13b))
    # PagedAttention paper Fig. 1: 26 GB of weights, about 12 GB of KV cache on an A100-40GB.
    # We get 12.07e9 B (11.24 GiB): 0.9 x 40 GiB - 25.71e9 weights - 0.86e9 headroom.
    assert 11.5e9 < kv < 12.5e9
    expected = (0.9 * a100.memory_bytes - opt13b.num_params * 2 - cm.DEFAULTS["runtime_reserved_bytes"]
                - cm.activation_bytes_per_gpu(opt13b))
    assert kv == int(expected)
    assert KVGeometry.from_model_cfg(opt13b).slots_for(kv) == kv // model_geometry(opt13b).bytes_per_slot


def test_kv_cache_bytes_tensor_parallel_and_errors():
    opt175 = load_model("opt-175b")
    with pytest.raises(ValueError, match=r"does not fit on 1 x a100-80gb.*raise gpu.count"):
        cm.kv_cache_bytes(opt175, load_gpu("a100-80gb"), geometry=model_geometry(opt175))
    kv8 = cm.kv_cache_bytes(opt175, load_gpu("a100-80gb", count=8), geometry=model_geometry(opt175))
    assert 200e9 < kv8 < 8 * 80 * 2**30 * 0.9 - 349e9
    with pytest.raises(ValueError, match="utilization"):
        cm.kv_cache_bytes(opt175, load_gpu("a100-80gb", count=8), utilization=1.5, geometry=model_geometry(opt175))


# -- closed forms -------------------------------------------------------------------------
def test_large_decode_batch_is_bandwidth_bound(opt13b, a100):
    t = times(opt13b, a100, [decode_chunk(i, 64, 16) for i in range(32)])
    c = cm.op_constants(a100)
    weights_s = opt13b.num_params * 2 / (a100.mem_bandwidth * c["gemm_eff_bw"])  # linear + lm_head ~ all params
    fixed_s = 40 * (4 * c["gemm_fixed_s"] + 2 * c["norm_fixed_s"] + c["act_fixed_s"] + c["add_fixed_s"]) + c["gemm_fixed_s"]
    assert t["forward_s"] == pytest.approx(weights_s + fixed_s, rel=0.03)  # + activations and elementwise ops: ~2%
    assert t["forward_s"] > weights_s + fixed_s
    assert t["duration_s"] == pytest.approx(t["overhead_s"] + weights_s + fixed_s, rel=0.10)
    assert t["dense_flops"] / (a100.peak_flops * cm.matmul_efficiency(a100, 5120)) < 0.3 * t["forward_s"]


def test_large_prefill_is_compute_bound(opt13b, a100):
    t = times(opt13b, a100, [prefill_chunk(i, 1024, 16) for i in range(8)])
    c, m, h = cm.op_constants(a100), 8 * 1024, 5120

    def gemm_s(k: int, n: int) -> float:  # Hockney efficiency on each dimension (kvbench/sim/operators.py)
        eff = c["gemm_eff_max"] * m / (m + c["gemm_m_half"]) * n / (n + c["gemm_n_half"]) * k / (k + c["gemm_k_half"])
        return 2 * m * k * n / (a100.peak_flops * eff)

    compute_s = 40 * (gemm_s(h, 3 * h) + gemm_s(h, h) + gemm_s(h, 4 * h) + gemm_s(4 * h, h))
    bw = a100.mem_bandwidth
    elementwise_s = 40 * m * 2 * (2 * 2 * h / (bw * c["norm_eff_bw"]) + 2 * 4 * h / (bw * c["act_eff_bw"])
                                  + 3 * h / (bw * c["add_eff_bw"]))
    assert t["forward_s"] == pytest.approx(compute_s + elementwise_s, rel=0.01)
    assert t["duration_s"] == pytest.approx(compute_s + elementwise_s, rel=0.05)
    # causal attention FLOPs of the chunks: 4 * heads * head_size * layers per (query, key) pair
    pairs = 8 * 1024 * 1025 / 2
    attn_s = pairs * 4 * 40 * 128 * 40 / (a100.peak_flops * cm.DEFAULTS["eff_attn_flops"])
    assert t["attention_s"] == pytest.approx(attn_s + 8 * 1024 * model_geometry(opt13b).bytes_per_slot / (
        a100.mem_bandwidth * cm.DEFAULTS["eff_bw"]), rel=1e-9)


@pytest.mark.parametrize("bs", [1, 8, 16, 32])
@pytest.mark.parametrize("ctx", [1, 15, 16, 17, 100])
def test_block_tail_waste_is_exact(opt13b, a100, bs, ctx):
    gpu = no_gather(a100)
    t = times(opt13b, gpu, [decode_chunk(0, ctx, bs)], bs=bs)
    padded = math.ceil(ctx / bs) * bs
    bps = model_geometry(opt13b).bytes_per_slot
    assert t["kv_read_bytes"] == padded * bps
    # decode attention is bandwidth bound: read the padded context, write one new slot
    bw = a100.mem_bandwidth * cm.DEFAULTS["eff_bw"]
    assert t["attention_s"] == pytest.approx((padded + 1) * bps / bw, rel=1e-12)


def test_small_blocks_pay_gather_granularity(opt13b, a100):
    ctx = 256  # a multiple of every block size: no tail waste, only granularity differs
    att = {bs: times(opt13b, a100, [decode_chunk(0, ctx, bs)], bs=bs)["attention_s"] for bs in (1, 4, 16, 64)}
    assert att[1] > att[4] > att[16] > att[64]
    # Hockney model: a run of S = bs * head_size * 2 bytes moves at S / (S + 512) of the rate
    base = times(opt13b, no_gather(a100), [decode_chunk(0, ctx, 16)], bs=16)["attention_s"]
    write_s = model_geometry(opt13b).bytes_per_slot / (a100.mem_bandwidth * cm.DEFAULTS["eff_bw"])
    read_s = base - write_s
    for bs in (1, 16):
        run = bs * 128 * 2
        assert att[bs] - write_s == pytest.approx(read_s * (run + 512) / run, rel=1e-9)


def test_copy_ops_cost_read_plus_write(opt13b, a100):
    ops = [CopyOp(0, 1000, 16), CopyOp(16, 2000, 48)]
    bps = model_geometry(opt13b).bytes_per_slot
    bw = a100.mem_bandwidth * cm.DEFAULTS["eff_bw"]
    t = times(opt13b, no_gather(a100), [], copy_ops=ops)
    assert t["copy_s"] == pytest.approx(2 * 64 * bps / bw, rel=1e-12)
    assert t["forward_s"] == t["attention_s"] == 0.0
    big = times(opt13b, a100, [], copy_ops=[CopyOp(0, 100_000, 4096)])
    assert big["copy_s"] == pytest.approx(2 * 4096 * bps / bw, rel=0.01)


def test_swaps_cost_pcie_bytes_plus_per_transfer_latency(opt13b, a100):
    bps = model_geometry(opt13b).bytes_per_slot
    host = a100.host_bandwidth * cm.DEFAULTS["eff_host"]
    lat = cm.DEFAULTS["host_transfer_latency_s"] * 2 * opt13b.num_layers
    contiguous = SwapOp(7, list(range(100, 164)))
    scattered = SwapOp(8, [b * 16 + i for b in (9, 3, 40, 1) for i in range(16)])
    t1 = times(opt13b, a100, [], swap_out=[contiguous])
    t4 = times(opt13b, a100, [], swap_in=[scattered])
    assert t1["swap_s"] == pytest.approx(64 * bps / host + 1 * lat, rel=1e-12)
    assert t4["swap_s"] == pytest.approx(64 * bps / host + 4 * lat, rel=1e-12)


def test_tensor_parallel_splits_work_and_adds_all_reduces():
    opt175 = load_model("opt-175b")
    chunks = [decode_chunk(i, 64, 16) for i in range(16)]
    gpu8 = load_gpu("a100-80gb", count=8)
    t8 = times(opt175, gpu8, chunks)
    gpu = load_gpu("a100-80gb")
    c = cm.op_constants(gpu)
    weights_s = opt175.num_params * 2 / 8 / (gpu.mem_bandwidth * c["gemm_eff_bw"])
    fixed_s = 96 * (4 * c["gemm_fixed_s"] + 2 * c["norm_fixed_s"] + c["act_fixed_s"] + c["add_fixed_s"])
    # 2 all-reduces per layer of 16 * hidden * 2 B: the measured NCCL table for 8 GPUs (32 us each)
    allreduce_s = 2 * 96 * allreduce.interpolate(*allreduce.table_for("a100_dgx", 8), 16 * 12288 * 2)
    assert allreduce_s == pytest.approx(2 * 96 * 32e-6, rel=0.05)
    assert t8["forward_s"] == pytest.approx(weights_s + fixed_s + allreduce_s, rel=0.03)
    # without a table: latency + ring traffic 2 (n-1)/n * tokens * hidden * 2 B
    formula = load_gpu("a100-80gb", count=8, allreduce_table=None)
    free = load_gpu("a100-80gb", count=8, allreduce_table=None, interconnect_bandwidth=1e30)
    ring_s = 2 * 7 / 8 * 16 * 12288 * 2 / (gpu.interconnect_bandwidth * gpu.eff_interconnect)
    assert times(opt175, formula, chunks)["forward_s"] - times(opt175, free, chunks)["forward_s"] == pytest.approx(
        2 * 96 * ring_s, rel=1e-6)
    assert times(opt175, free, chunks)["forward_s"] - t8["forward_s"] == pytest.approx(
        2 * 96 * gpu.allreduce_latency_s - allreduce_s, rel=1e-6)
    one = times(opt175, gpu, chunks)  # a hypothetical single GPU: no all-reduce, 8x the bytes
    assert one["attention_s"] == pytest.approx(8 * t8["attention_s"], rel=1e-12)


def test_timings_sum_to_duration_and_empty_step_is_free(opt13b, a100):
    ex = SimExecutor(opt13b, a100, geometry=model_geometry(opt13b))
    batch = StepBatch([decode_chunk(0, 40, 16), prefill_chunk(1, 30, 16, start=16)], 16,
                      copy_ops=[CopyOp(0, 64, 16)], swap_out=[SwapOp(3, [5, 6, 7])])
    r = ex.execute(batch)
    assert set(r.timings) == set(cm.TIMING_KEYS)
    assert all(v > 0 for v in r.timings.values())
    assert sum(r.timings.values()) == pytest.approx(r.duration_s, rel=1e-12)
    assert ex.execute(StepBatch([], 16)).duration_s == 0.0


def test_plain_objects_and_float32_models():
    model = SimpleNamespace(name="t", family="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                            head_size=16, intermediate_size=128, vocab_size=256, max_model_len=256,
                            dtype="float32", num_params=None)
    gpu = SimpleNamespace(name="g", memory_bytes=2**30, peak_flops=100e12, peak_flops_fp32=10e12,
                          mem_bandwidth=1e12, interconnect_bandwidth=None, host_bandwidth=32e9, count=1)
    p = cm.CostParams.from_configs(model, gpu, geometry=model_geometry(model))
    assert p.flops_rate == pytest.approx(10e12 * cm.DEFAULTS["gemm_eff_max"])  # fp32: CUDA cores
    assert cm.weight_bytes(model) == cm.count_params(model) * 4
    r = SimExecutor(model, gpu, seed=1, geometry=model_geometry(model)).execute(StepBatch([decode_chunk(3, 10, 4)], 4))
    assert 0 <= r.next_tokens[3] < 256 and r.duration_s > 0
    with pytest.raises(ValueError, match="model.dtype must be one of"):
        cm.CostParams.from_configs(SimpleNamespace(**{**vars(model), "dtype": "int8"}), gpu,
                                   geometry=model_geometry(model))
    with pytest.raises(ValueError, match="missing field 'mem_bandwidth'"):
        cm.CostParams.from_configs(model, SimpleNamespace(**{**vars(gpu), "mem_bandwidth": None}),
                                   geometry=model_geometry(model))


# -- the executor -------------------------------------------------------------------------
def run_batches(seed: int):
    ex = SimExecutor(load_model("tiny-opt"), load_gpu("a10g"), seed=seed,
                     geometry=model_geometry(load_model("tiny-opt")))
    out = []
    for step in range(5):
        chunks = [decode_chunk(i, 10 + step, 8, sample=(i != 2), k=3 if i == 1 else 0) for i in range(4)]
        r = ex.execute(StepBatch(chunks, 8))
        out.append((r.next_tokens, r.top_logprobs, r.duration_s))
    return out


def test_deterministic_given_seed():
    assert run_batches(0) == run_batches(0)
    assert [o[0] for o in run_batches(0)] != [o[0] for o in run_batches(1)]


def test_next_tokens_and_top_logprobs_shape():
    vocab = 256
    for next_tokens, top, _ in run_batches(3):
        assert set(next_tokens) == {0, 1, 3}  # chunk 2 does not sample
        assert all(0 <= t < vocab for t in next_tokens.values())
        assert set(top) == {1}
        cands = top[1]
        assert len(cands) == 3 and len({t for t, _ in cands}) == 3
        assert all(0 <= t < vocab for t, _ in cands)
        lps = [lp for _, lp in cands]
        assert all(lp < 0 for lp in lps) and lps == sorted(lps, reverse=True) and len(set(lps)) == 3
        assert sum(math.exp(lp) for lp in lps) < 1.0
        assert next_tokens[1] == cands[0][0]  # the sampled token is the best candidate


def test_parallel_sampling_returns_extra_tokens_and_costs_draws(opt13b, a100):
    ex = SimExecutor(opt13b, a100, seed=5, geometry=model_geometry(opt13b))
    assert ex.needs_block_tables is False  # the scheduler may skip building block tables
    chunk = prefill_chunk(0, 20, 16)._replace(num_samples=4)
    r = ex.execute(StepBatch([chunk, prefill_chunk(1, 20, 16)], 16))
    assert set(r.next_tokens) == {0, 1} and set(r.extra_tokens) == {0}
    assert len(r.extra_tokens[0]) == 3 and all(0 <= t < opt13b.vocab_size for t in r.extra_tokens[0])
    single = SimExecutor(opt13b, a100, geometry=model_geometry(opt13b)).execute(
        StepBatch([prefill_chunk(0, 20, 16)] * 2, 16))
    assert r.timings["sampling_s"] == pytest.approx(5 / 2 * single.timings["sampling_s"], rel=1e-12)
    assert r.timings["forward_s"] == single.timings["forward_s"]  # one lm_head row per sequence


def test_build_executor():
    model = load_model("tiny-llama")
    ex = build_executor("sim", model_cfg=model, gpu_cfg=load_gpu("h200"), seed=2, geometry=model_geometry(model))
    assert isinstance(ex, SimExecutor)
    with pytest.raises(ValueError, match=r"^backend must be one of \['hf', 'sim'\], got 'gpu'$"):
        build_executor("gpu")


def test_execute_throughput_256_decode_chunks(opt13b, a100):
    """Report calls/s of execute() on a 256-sequence decode batch (block tables of ~32 blocks)."""
    ex = SimExecutor(opt13b, a100, geometry=model_geometry(opt13b))
    batch = StepBatch([decode_chunk(i, 500 + i, 16) for i in range(256)], 16)
    ex.execute(batch)
    n, start = 300, time.perf_counter()
    for _ in range(n):
        ex.execute(batch)
    rate = n / (time.perf_counter() - start)
    print(f"\nSimExecutor.execute: {rate:,.0f} calls/s on a 256-chunk decode batch")
    assert rate > 500  # loose floor for slow shared CI cores; expect several thousand


def test_system_profile_host_costs_take_precedence_and_scale_with_the_batch():
    from omegaconf import OmegaConf

    from kvbench.sim.cost_model import CostParams, StepSummary, step_time
    from kvbench.sim.profiles import load_gpu, load_model

    model, gpu = load_model("opt-13b"), load_gpu("a100-40gb")
    gpu.step_overhead_s = 2e-3  # a GPU-profile override the system profile beats
    system = OmegaConf.load("conf/system/vllm-2023.yaml").system
    base = CostParams.from_configs(model, gpu, geometry=model_geometry(model))
    paper = CostParams.from_configs(model, gpu, system, geometry=model_geometry(model))
    assert base.overhead_s - paper.overhead_s == pytest.approx(2e-3 - 4e-3)
    step = StepSummary(block_size=16, num_tokens=10, num_seqs=10, num_sampled=10, num_draws=10,
                       decode_pairs=1000, decode_blocks=70)
    extra = step_time(paper, step)["overhead_s"] - step_time(base, step)["overhead_s"]
    assert extra == pytest.approx(2e-3 + 10 * 3.5e-5)
    sampling = step_time(paper, step)["sampling_s"] - step_time(base, step)["sampling_s"]
    assert sampling == pytest.approx(10 * (2.73e-4 - 1e-6))


def test_eager_issue_floor_holds_small_steps_and_leaves_large_ones():
    """system.eager_layer_issue_s: a step's GPU part (forward + attention) lasts at least
    num_layers times it, the wait booked as overhead; off (0) by default, and a step whose
    kernels outlast the floor is unchanged."""
    from kvbench.sim.cost_model import CostParams, StepSummary, step_time

    model, gpu = load_model("opt-13b"), load_gpu("a100-40gb")
    system = OmegaConf.load("conf/system/vllm-2023.yaml").system
    off = CostParams.from_configs(model, gpu, system, geometry=model_geometry(model))
    assert off.issue_floor_s == 0.0
    system.eager_layer_issue_s = 1.0e-3
    on = CostParams.from_configs(model, gpu, system, geometry=model_geometry(model))
    assert on.issue_floor_s == pytest.approx(40 * 1.0e-3)
    small = StepSummary(block_size=16, num_tokens=1, num_seqs=1, num_sampled=1, num_draws=1,
                        decode_pairs=100, decode_blocks=7)
    t_off, t_on = step_time(off, small), step_time(on, small)
    gpu_part = t_off["forward_s"] + t_off["attention_s"]
    assert gpu_part < 40e-3
    assert t_on["overhead_s"] - t_off["overhead_s"] == pytest.approx(40e-3 - gpu_part)
    assert t_on["duration_s"] - t_off["duration_s"] == pytest.approx(40e-3 - gpu_part)
    big = StepSummary(block_size=16, num_tokens=4096, num_seqs=8, num_sampled=8, num_draws=8,
                      prefill_pairs=8 * 512 * 513 // 2, prefill_blocks=8 * 32)
    assert step_time(on, big) == step_time(off, big)
    empty = StepSummary(block_size=16)
    assert step_time(on, empty)["duration_s"] == 0.0


def test_the_executor_logs_where_its_operator_constants_come_from(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="kvbench"):
        SimExecutor(load_model("tiny-opt"), load_gpu("a10g"), geometry=model_geometry(load_model("tiny-opt")))
    lines = [r.getMessage() for r in caplog.records if "operator constants" in r.getMessage()]
    assert lines == ["operator constants (op_model roofline): gpu profile a10g sets none; the rest are the "
                     "a100-80gb fit (fit this GPU's own with kvbench-validate --fit-ops DIR)"]


def test_fixed_floor_raises_decode_steps_and_leaves_big_prefills_near_the_roofline():
    """op_model changes only the elementwise kernels: a 1-token step's layer takes longer (the
    norms, activation and rotary no longer shrink with the batch), a 4,096-token one within 3%."""
    model = load_model("llama-3-8b")
    roofline = cm.CostParams.from_configs(model, load_gpu("h100-80gb"), geometry=model_geometry(model))
    floor = cm.CostParams.from_configs(model, load_gpu("h100-80gb", op_model="fixed_floor"),
                                       geometry=model_geometry(model))
    assert floor.dense_layer_s(1) > roofline.dense_layer_s(1) * 1.02
    assert floor.dense_layer_s(4096) == pytest.approx(roofline.dense_layer_s(4096), rel=0.03)
    with pytest.raises(ValueError, match="gpu.op_model must be one of"):
        cm.CostParams.from_configs(model, load_gpu("h100-80gb", op_model="other"), geometry=model_geometry(model))
