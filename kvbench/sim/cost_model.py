"""Cost model of one engine step on a named GPU (``backend=sim``): the formula and every constant.

No model runs. A step's duration is a roofline estimate per phase from the GPU profile
(``conf/gpu/*.yaml``: peak FLOP/s, memory bandwidth, memory size, link bandwidths, ``count``)
and the model geometry (``conf/model/*.yaml``). With ``n = gpu.count`` GPUs in tensor
parallel, every FLOP and byte below is divided by ``n`` (Megatron-style sharding of heads and
FFN columns) and all-reduces are added.

    duration = overhead + forward + attention + sampling + copy + swap

    (forward + attention is at least num_layers * eager_layer_issue_s when a system sets it: an
    eager-mode engine's host issues each layer's kernels one by one, and a step too small to
    hide that waits for it; 0, i.e. off, unless a system profile sets it)

    overhead  = step_overhead_s + num_layers * layer_overhead_s + num_seqs * seq_overhead_s
        num_seqs  = sequences in the step's batch (host-side scheduling and input preparation)
                + (page_maps + page_unmaps) * 2 * num_layers * VMM_CALL_S     [vattention only]
    forward   = num_layers * layer(num_tokens) + gemm(num_sampled, hidden, vocab / n)
                + 2 * num_layers * all_reduce(num_tokens * hidden * dtype_bytes)      [n > 1]
        layer(m)          = one rank's QKV, O, up, down GEMMs, two norms, activation, rotary
                            (Llama-like) and residual add, each a roofline with a fixed cost
                            and a GEMM efficiency that depends on its shape (``operators``)
        all_reduce(B)     = the GPU profile's measured NCCL table (``allreduce_table``,
                            interpolated by size for n workers; ``allreduce``), else
                            allreduce_latency_s + 2 (n-1)/n * B / (interconnect_bw * eff_interconnect)
    attention = sum over {prefill chunks, decode chunks} (two kernels) of
                  max(pairs * 4 * num_heads * head_size * num_layers / (peak * eff_attn_flops),
                      (blocks * block_size * bytes_per_slot + blocks * segments_per_block
                       * gather_half_bytes) / (bw * eff_bw))
                + num_tokens * bytes_per_slot / (bw * eff_bw)           (writing the new K/V)
        blocks  = sum over chunks of ceil(context_len / block_size)  (whole blocks are read:
                  the tail of the last block is waste the kernel still loads)
        pairs   = causal (query, key) pairs: context_len for a decode token;
                  q * start_pos + q (q + 1) / 2 for a chunk of q new tokens
        segments_per_block = 2 * num_layers * num_kv_heads: one contiguous run of
                  block_size * head_size * dtype_bytes bytes per (layer, K|V, KV head), as in
                  vLLM's paged cache layout
    sampling  = num_draws * (sample_host_s + SAMPLING_PASSES * vocab * 4 / (bw * eff_bw))
        num_draws = tokens drawn (num_samples of each sampled chunk: parallel sampling draws
                    several from one logits row)
    copy      = 2 * (copy_slots * bytes_per_slot + num_copy_ops * 2 * num_layers
                     * gather_half_bytes) / (bw * eff_bw)                    (read + write)
    swap      = swap_slots * bytes_per_slot / (host_bw * eff_host)
                + swap_runs * 2 * num_layers * host_transfer_latency_s
        swap_runs = maximal runs of consecutive device slots (one copy per run, layer and K|V)

Gather granularity. A paged kernel reads one block's K (or V) of one head as a contiguous run
of ``S = block_size * head_size * dtype_bytes`` bytes. Short runs use DRAM bandwidth badly
(row activations, partial bursts) and leave the kernel's thread groups idle. We model this
with Hockney's half-performance length (R. Hockney, *The science of computer benchmarking*,
1996; Hockney & Jesshope, *Parallel Computers 2*, 1988): moving a run of S bytes costs as
much as ``S + gather_half_bytes`` bytes at full rate, i.e. efficiency S / (S + S_half). With
S_half = 512 B (an assumption, half of the 1 KiB HBM2 page of one pseudo-channel, JEDEC
JESD235): fp16, head_size 128: block 1 -> 33 %, 8 -> 80 %, 16 -> 89 %, 64 -> 97 %. This
reproduces the direction of the PagedAttention paper's block-size ablation (Kwon et al.,
SOSP 2023, Sec. 7.2, Fig. 18: small blocks "cannot fully utilize the GPU's parallelism for
reading and processing KV cache"); it was not fitted to that figure. The same per-run cost
applies to in-pool copies (one run per copy op, layer and K|V). Swaps over PCIe pay a fixed
per-transfer latency instead (Kwon et al. Sec. 7.3, Fig. 19a: swapping is inefficient with
small blocks because of the many small PCIe transfers).

The granularity is ``StepBatch.block_size``, whatever the strategy: contiguous and buddy
strategies hand over their alignment block (16 by default), so they read whole 16-token
blocks too; their advantage is not here but in copies and swaps of long contiguous runs.
``peak`` is the fp16/bf16 tensor peak, or ``peak_flops_fp32`` for float32 models. An empty
step (nothing to compute, copy or swap) costs 0.

Not modelled: embedding gathers, overlap between phases (they add up), and KV head replication
when ``count`` exceeds ``num_kv_heads``. Attention is a roofline with the stated efficiencies:
the operator measurements the rest is checked against hold no attention kernel (a GPU run,
``scripts/gpu_check.sh``, is what would measure it).

KV memory (``kv_cache_bytes``): as vLLM's profiler does,

    kv = n * memory_bytes * utilization - weight_bytes - n * (runtime_reserved_bytes
         + activation_bytes_per_gpu)

with ``weight_bytes = num_params * dtype_bytes`` and the activation headroom the peak live
activations of one layer of a profiling forward (activations are freed layer by layer in
inference) plus its fp32 logits. How many tokens and logits rows that forward has is the
profiler's, per vLLM version (``system.memory_profile``, ``profiled_step``):

    vllm-v1   tokens = max_num_batched_tokens, or max(that, max_model_len) without chunked
              prefill; logits rows = min(tokens, max_num_seqs)
    vllm-0.1  tokens = max_num_batched_tokens; logits rows = max_num_seqs

Host-side costs (``step_overhead_s``, ``seq_overhead_s``, ``sample_host_s``) belong to the
system being modelled, not the GPU: a system profile (``conf/system/*.yaml``, e.g. paper-era
``vllm-2023`` or ``modern``) sets them with their sources and takes precedence over the GPU
profile and DEFAULTS (``constant`` below).

Constants. Datasheet figures live in the GPU profiles. The efficiency and overhead constants
below are first-principles values with their sources, except those marked CALIBRATED: the
operator constants (``operators.OP_KEYS``) and the all-reduce fallback are fitted per GPU on
measured operator and NCCL times (``kvbench-validate --fit-ops``; the fitted values live in the
A100 and H100 profiles, DEFAULTS hold the A100-80GB fit), and ``layer_overhead_s`` on
published FasterTransformer latencies (``kvbench-validate --fit``); never on the PagedAttention
paper's results. A profile may override any of them with a top-level key of the same name.
``gpu.op_model`` picks the operator model: ``roofline`` (the default, every committed result)
or ``fixed_floor`` (elementwise kernels with a minimum time, constants in the profile's
``fixed_floor`` mapping, FIXED_FLOOR_DEFAULTS where unset; ``operators``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvbench.batch import BatchCounts
from kvbench.geometry import DTYPE_BYTES, KVGeometry
from kvbench.sim import allreduce
from kvbench.sim.operators import DEFAULT_OP_MODEL, OP_KEYS, OP_MODELS, LayerShape, gemm_s

MiB = 1 << 20

# Families the cost model counts: OPT, and dense decoders with a gate/up/down MLP and RMSNorm (Q/K/V
# biases for Qwen2). Mixture-of-experts and two-matrix-MLP families run on backend=hf only.
FAMILIES = ("opt", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2")
# Mixed models (conf/model: gpt-oss, Llama 4, Qwen3-Next, Jamba, Falcon-H1): timed as dense Llama-style
# layers whose intermediate_size is the ACTIVE FFN width; state layers timed as attention layers.
FAMILIES += ("gpt_oss", "llama4_text", "qwen3_next", "jamba", "falcon_h1")

DEFAULTS: dict[str, float] = {
    # Operator constants (kvbench/sim/operators.py): GEMM efficiency by shape, achieved
    # bandwidth and fixed cost per kernel kind. CALIBRATED on the A100-80GB operator
    # measurements (`kvbench-validate --fit-ops`, the a100-80gb profile holds the same values);
    # a GPU without a fit of its own (a10g) takes these A100 values.
    "gemm_eff_max": 0.7615,
    "gemm_m_half": 90.95,
    "gemm_n_half": 70.57,
    "gemm_k_half": 60.1,
    "gemm_eff_bw": 0.7748,
    "norm_eff_bw": 0.3628,
    "act_eff_bw": 0.4921,
    "rope_eff_bw": 0.4437,
    "add_eff_bw": 0.9317,
    "gemm_fixed_s": 5.21e-06,
    "norm_fixed_s": 2.422e-06,
    "act_fixed_s": 2.22e-06,
    "rope_fixed_s": 2.358e-06,
    "add_fixed_s": 1.146e-06,
    # Achieved fraction of peak FLOP/s of prefill attention: FlashAttention-2 reaches 50-73 %
    # of A100 peak in the forward pass (Dao, "FlashAttention-2", 2023, Sec. 4.1).
    "eff_attn_flops": 0.50,
    # Achieved fraction of peak DRAM bandwidth for large streaming reads: STREAM-like kernels
    # reach about 85-90 % on A100 and H100 HBM (BabelStream results; NVIDIA's own copy
    # bandwidth figures in the CUDA samples' bandwidthTest).
    "eff_bw": 0.85,
    # Achieved all-reduce bus bandwidth over the link rate, for the fallback formula.
    # CALIBRATED with allreduce_latency_s. Lower than nccl-tests' 75-80 % for large messages:
    # one latency and one bandwidth cannot follow the measured curve over 2 KB to 64 MB, and
    # the fit settles here (median error 13.5 % on the A100 table, which the A100 profiles use).
    "eff_interconnect": 0.4881,
    # Pinned host<->device copies reach about 80 % of the PCIe x16 rate (about 25 of 32 GB/s on
    # Gen4; CUDA samples bandwidthTest).
    "eff_host": 0.80,
    # Hockney half-performance run length of a gathered KV read, bytes (see module docstring).
    # Assumption: half of a 1 KiB HBM2 pseudo-channel page (JEDEC JESD235). Calibrate.
    "gather_half_bytes": 512.0,
    # Host-side cost of one engine iteration that does not overlap the GPU (scheduling, input
    # tensors, the synchronising copy of sampled tokens). Assumption of order 1 ms for a
    # Python serving engine; calibrate with the hf executor.
    "step_overhead_s": 1.0e-3,
    # Per-layer cost beyond the kernels' GPU time (the operator constants hold that): host-side
    # launches of a layer's ~10 kernels and gaps between them that a small step cannot hide.
    # CALIBRATED on the single-GPU FasterTransformer latencies only (`kvbench-validate --fit`),
    # so its tensor-parallel rows are held out.
    "layer_overhead_s": 9.452e-05,
    # All-reduce fallback for GPU profiles without a measured table (allreduce_table) or worker
    # counts the table lacks: latency + ring traffic. CALIBRATED: least squares on log error
    # over the A100 DGX NCCL table, 2-8 workers (`kvbench-validate --fit-ops`).
    "allreduce_latency_s": 2.8e-05,
    # Fixed cost of one host<->device transfer (cudaMemcpyAsync call + DMA setup), order
    # 5 us (CUDA samples bandwidthTest at small sizes).
    "host_transfer_latency_s": 5.0e-6,
    # Host-side cost per sampled token (building the output, Python bookkeeping). Assumption.
    "sample_host_s": 1.0e-6,
    # Host-side cost per sequence in a step's batch (scheduling, block tables, inputs).
    # 0 unless a system profile sets it.
    "seq_overhead_s": 0.0,
    # Host time to issue one decoder layer's kernels in an eager-mode (no CUDA graphs) engine:
    # the GPU part of a step takes at least num_layers times this. 0 (off) unless a system
    # profile or an override sets it (a what-if for 2023's eager engines; see conf/system).
    "eager_layer_issue_s": 0.0,
    # Memory the runtime holds outside the KV pool and weights on each GPU: CUDA context,
    # cuBLAS/NCCL workspaces, allocator slack. Assumption, order of what nvidia-smi shows
    # for a fresh PyTorch process (a few hundred MiB).
    "runtime_reserved_bytes": float(512 * MiB),
}

SAMPLING_PASSES = 4  # passes over one row of fp32 logits to sample: max, exp-sum, normalise, draw
LOGIT_BYTES = 4  # logits are fp32
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM v1's default step budget (vllm/config/scheduler.py SchedulerConfig)
MEMORY_PROFILES = ("vllm-v1", "vllm-0.1")  # whose profiling forward sizes the pool (``profiled_step``)

TIMING_KEYS = ("overhead_s", "forward_s", "attention_s", "sampling_s", "copy_s", "swap_s")


# -- model geometry -----------------------------------------------------------------------
# vAttention page (un)mapping: one CUDA virtual-memory driver call (cuMemMap + cuMemSetAccess,
# or cuMemUnmap) per layer, K|V tensor and page group. An assumption of this harness, of the
# order the vAttention paper (Prabhu et al., ASPLOS 2025, Sec. 5-6) reports for these calls
# (tens of microseconds) and hides with a background thread; charged here serially, in the
# step's overhead, so it is an upper bound on what a real deployment pays.
VMM_CALL_S = 20e-6

def _field(cfg, name: str, what: str):
    value = getattr(cfg, name, None)
    if value is None:
        raise ValueError(f"{what} config: missing field {name!r}")
    return value


def _check_model(model) -> None:
    family = _field(model, "family", "model")
    if family not in FAMILIES:
        raise ValueError(f"model.family must be one of {list(FAMILIES)}, got {family!r}")
    dtype = _field(model, "dtype", "model")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"model.dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")


def linear_params_per_layer(model) -> int:
    """Weights of one layer's matrix multiplications (biases and norms excluded)."""
    h, hd = int(model.hidden_size), int(model.head_size)
    q_dim, kv_dim = int(model.num_heads) * hd, int(model.num_kv_heads) * hd
    attention = h * q_dim + 2 * h * kv_dim + q_dim * h
    mlp_matrices = 2 if model.family == "opt" else 3  # fc1, fc2 | gate, up, down
    return attention + mlp_matrices * h * int(model.intermediate_size)


def count_params(model, tied_embeddings: bool | None = None) -> int:
    """Exact parameter count of an OPT- or Llama-style model from its geometry.

    OPT: learned positions (max_model_len + 2 rows, the offset of HF ``OPTLearnedPositional-
    Embedding``), biases everywhere, LayerNorm with bias, lm_head tied. Llama, Mistral: no
    biases, RMSNorm, lm_head untied. Qwen2: Llama plus Q/K/V biases. ``tied_embeddings`` (or
    a ``tie_word_embeddings`` field in the config) overrides the family default, e.g. True
    for SmolLM2.
    """
    _check_model(model)
    if tied_embeddings is None:
        tied_embeddings = getattr(model, "tie_word_embeddings", None)
    if tied_embeddings is None:
        tied_embeddings = model.family == "opt"
    h, vocab, layers = int(model.hidden_size), int(model.vocab_size), int(model.num_layers)
    q_dim = int(model.num_heads) * int(model.head_size)
    kv_dim = int(model.num_kv_heads) * int(model.head_size)
    ffn = int(model.intermediate_size)
    per_layer = linear_params_per_layer(model)
    if model.family == "opt":
        per_layer += q_dim + 2 * kv_dim + h  # q, k, v, out_proj biases
        per_layer += ffn + h  # fc1, fc2 biases
        per_layer += 2 * 2 * h  # two LayerNorms, weight and bias
        total = vocab * h + (int(model.max_model_len) + 2) * h + 2 * h  # + final LayerNorm
    else:
        if model.family == "qwen2":
            per_layer += q_dim + 2 * kv_dim
        per_layer += 2 * h  # two RMSNorms
        total = vocab * h + h  # + final RMSNorm
    total += layers * per_layer
    if not tied_embeddings:
        total += vocab * h
    return total


def num_params(model) -> int:
    value = getattr(model, "num_params", None)
    return int(value) if value is not None else count_params(model)


def weight_bytes(model) -> int:
    return num_params(model) * DTYPE_BYTES[model.dtype]


@dataclass(frozen=True, slots=True)
class ProfiledStep:
    """The dummy forward a vLLM profiler runs before it sizes the KV pool."""

    tokens: int  # tokens in the forward
    logit_rows: int  # rows of fp32 logits the sampler pass holds


def profiled_step(max_model_len: int, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                  max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, chunked_prefill: bool = True,
                  memory_profile: str = "vllm-v1") -> ProfiledStep:
    """The profiling forward of ``memory_profile``'s vLLM for these engine limits.

    vllm-v1: ``GPUModelRunner.profile_run`` (vllm/v1/worker/gpu_model_runner.py) runs
    ``_dummy_run(max_num_tokens)``, ``max_num_tokens`` being the scheduler's
    ``max_num_batched_tokens``, over ``min(tokens, max_num_seqs)`` requests whose last tokens
    the sampler pass reads (``_dummy_sampler_run``); ``Worker.determine_available_memory``
    (vllm/v1/worker/gpu_worker.py) takes the peak of that run. Without chunked prefill the
    budget is at least ``max_model_len``: ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
    (vllm/engine/arg_utils.py) raises the default to it and ``SchedulerConfig.verify_max_model_len``
    (vllm/config/scheduler.py) refuses a smaller one; kvbench keeps a smaller step budget and
    profiles as vLLM's default would.

    vllm-0.1 (the paper-era engine, ``system=vllm-2023``): ``Worker.profile_num_available_blocks``
    (vllm/worker/worker.py, vLLM 0.1.x; ``ModelRunner.profile_run`` in vllm/worker/model_runner.py
    from 0.2.2 does the same) runs ``max_num_seqs`` prompts that share ``max_num_batched_tokens``
    tokens, every one sampled; the budget is the configured one, whatever ``max_model_len``.
    """
    if memory_profile not in MEMORY_PROFILES:
        raise ValueError(f"system.memory_profile must be one of {list(MEMORY_PROFILES)}, got {memory_profile!r}")
    if memory_profile == "vllm-0.1":
        return ProfiledStep(tokens=max_num_batched_tokens, logit_rows=max_num_seqs)
    tokens = max_num_batched_tokens if chunked_prefill else max(max_num_batched_tokens, max_model_len)
    return ProfiledStep(tokens=tokens, logit_rows=min(tokens, max_num_seqs))


def activation_bytes_per_gpu(model, count: int = 1, step: ProfiledStep | None = None) -> int:
    """Peak live activations of a profiling forward (one layer at a time) plus fp32 logits;
    ``step``: that forward (``profiled_step``; None: vLLM v1's with its default limits).

    Per token: residual, normed input and attention output (3 x hidden, replicated across
    tensor-parallel ranks), the fused QKV output and the MLP's two intermediate tensors
    (sharded).
    """
    if step is None:
        step = profiled_step(int(model.max_model_len))
    h, hd = int(model.hidden_size), int(model.head_size)
    qkv = (int(model.num_heads) + 2 * int(model.num_kv_heads)) * hd
    per_token = DTYPE_BYTES[model.dtype] * (3 * h + (qkv + 2 * int(model.intermediate_size)) / count)
    logits = step.logit_rows * int(model.vocab_size) * LOGIT_BYTES
    return int(step.tokens * per_token + logits)


def gpu_constant(gpu, name: str) -> float:
    """A cost-model constant: the profile's override if it sets one, else DEFAULTS."""
    value = getattr(gpu, name, None)
    return float(DEFAULTS[name] if value is None else value)


HOST_KEYS = ("step_overhead_s", "seq_overhead_s", "sample_host_s", "eager_layer_issue_s")


def constant(gpu, system, name: str) -> float:
    """A host-side constant from the system profile when it sets one, else ``gpu_constant``."""
    value = getattr(system, name, None) if system is not None and name in HOST_KEYS else None
    return gpu_constant(gpu, name) if value is None else float(value)


# The fixed_floor operator model fitted on the A100-80GB measurements (`kvbench-validate
# --fit-ops`): what a profile selecting op_model fixed_floor without its own ``fixed_floor``
# mapping takes, as DEFAULTS hold the roofline fit.
FIXED_FLOOR_DEFAULTS: dict[str, float] = {
    "gemm_eff_max": 0.7615,
    "gemm_m_half": 90.95,
    "gemm_n_half": 70.57,
    "gemm_k_half": 60.1,
    "gemm_eff_bw": 0.7748,
    "norm_eff_bw": 0.3581,
    "act_eff_bw": 0.4796,
    "rope_eff_bw": 0.448,
    "add_eff_bw": 0.991,
    "gemm_fixed_s": 5.21e-06,
    "norm_fixed_s": 8.934e-07,
    "act_fixed_s": 1.253e-06,
    "rope_fixed_s": 2.248e-06,
    "add_fixed_s": 1.591e-06,
    "norm_min_tokens": 140.2,
    "act_min_tokens": 118.2,
    "rope_min_tokens": 92.25,
    "add_min_tokens": 0.08772,
}


def op_model(gpu) -> str:
    """The profile's operator model (``operators.OP_MODELS``); ``roofline`` when unset."""
    name = getattr(gpu, "op_model", None) or DEFAULT_OP_MODEL
    if name not in OP_MODELS:
        raise ValueError(f"gpu.op_model must be one of {list(OP_MODELS)}, got {name!r}")
    return name


def _own_op_constants(gpu) -> dict:
    """The operator constants the profile itself sets for its op_model."""
    if op_model(gpu) == "roofline":
        return {key: getattr(gpu, key) for key in OP_KEYS if getattr(gpu, key, None) is not None}
    own = getattr(gpu, "fixed_floor", None) or {}
    return {key: own[key] for key in OP_MODELS["fixed_floor"] if own.get(key) is not None}


def op_constants(gpu) -> dict[str, float]:
    """The operator constants of a GPU profile's op_model: the profile's own where set, else the
    A100-80GB fit (DEFAULTS for ``roofline``, FIXED_FLOOR_DEFAULTS for ``fixed_floor``)."""
    if op_model(gpu) == "roofline":
        return {key: gpu_constant(gpu, key) for key in OP_KEYS}
    return {key: float(value) for key, value in (FIXED_FLOOR_DEFAULTS | _own_op_constants(gpu)).items()}


FIT_PROFILE = "a100-80gb"  # the GPU profile whose operator fit DEFAULTS and FIXED_FLOOR_DEFAULTS hold


def cost_fit_source(gpu) -> str:
    """The GPU profile whose operator fit times the run: the profile's own name when it sets every
    operator constant of its op_model, else ``FIT_PROFILE``, whose fit fills the rest."""
    own = _own_op_constants(gpu)
    return str(getattr(gpu, "name", "?")) if len(own) == len(OP_MODELS[op_model(gpu)]) else FIT_PROFILE


def op_constants_source(gpu) -> str:
    """One line naming where a profile's operator constants come from (for the run's log)."""
    name, model = getattr(gpu, "name", "?"), op_model(gpu)
    own = _own_op_constants(gpu)
    if len(own) == len(OP_MODELS[model]):
        origin = getattr(gpu, "op_constants_from", None) or f"{name}'s own measured operator times"
        return f"operator constants (op_model {model}): gpu profile {name}, fitted on {origin}"
    which = "none" if not own else f"{len(own)} of {len(OP_MODELS[model])}"
    return (f"operator constants (op_model {model}): gpu profile {name} sets {which}; the rest are the "
            f"a100-80gb fit (fit this GPU's own with kvbench-validate --fit-ops DIR)")


def matmul_efficiency(gpu, hidden: int) -> float:
    """Achieved fraction of peak of a large square GEMM of width ``hidden`` (many tokens):
    the operators' shape efficiency at m -> infinity, n = k = hidden."""
    c = op_constants(gpu)
    return c["gemm_eff_max"] * hidden / (hidden + c["gemm_n_half"]) * hidden / (hidden + c["gemm_k_half"])


def gpu_count(gpu) -> int:
    count = int(getattr(gpu, "count", None) or 1)
    if count < 1:
        raise ValueError(f"gpu.count must be an integer >= 1, got {count}")
    return count


def kv_cache_bytes(
    model_cfg,
    gpu_cfg,
    utilization: float = 0.9,
    step: ProfiledStep | None = None,
    *,
    geometry: KVGeometry,
) -> int:
    """KV memory of all ``gpu.count`` GPUs together (see the module docstring); ``step``: the
    profiling forward (``profiled_step``; None: vLLM v1's at its default limits); ``geometry``:
    the model's (``kvbench.config.spec.model_geometry``), which must hold at least one slot."""
    _check_model(model_cfg)
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    count = gpu_count(gpu_cfg)
    usable = count * float(_field(gpu_cfg, "memory_bytes", "gpu")) * utilization
    weights = weight_bytes(model_cfg)
    headroom = count * (
        gpu_constant(gpu_cfg, "runtime_reserved_bytes")
        + activation_bytes_per_gpu(model_cfg, count, step)
    )
    kv = int(usable - weights - headroom)
    if kv < geometry.bytes_per_slot:
        raise ValueError(
            f"model {getattr(model_cfg, 'name', '?')} does not fit on "
            f"{count} x {getattr(gpu_cfg, 'name', '?')}: "
            f"weights {weights / 1e9:.1f} GB + headroom {headroom / 1e9:.1f} GB > "
            f"{usable / 1e9:.1f} GB usable at utilization {utilization}; raise gpu.count"
        )
    return kv


# -- the step formula ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CostParams:
    """Everything the step formula needs, derived once from a model and a GPU profile.

    Work quantities are for the whole model; ``step_time`` divides them by ``count``.
    """

    count: int
    num_layers: int
    hidden_bytes_per_token: int  # one token's hidden state (all-reduce payload)
    dense_flops_per_token: float  # 2 * linear params
    lm_head_flops_per_sample: float  # 2 * vocab * hidden
    weight_read_bytes: float  # linear weights + lm_head, read once per step
    attn_flops_per_pair: float  # 4 * num_heads * head_size * num_layers
    bytes_per_slot: float  # K and V of one token, all layers
    segments_per_block: float  # contiguous runs per block read: 2 * layers * kv heads
    segments_per_copy_op: float  # 2 * layers
    sample_cost_s: float  # per drawn token (not sharded)
    flops_rate: float  # peak * gemm_eff_max, one GPU (asymptotic; ``describe`` only)
    attn_flops_rate: float  # peak * eff_attn_flops, one GPU
    mem_rate: float  # bw * eff_bw, one GPU
    host_rate: float  # host_bw * eff_host, one GPU
    interconnect_rate: float  # interconnect_bw * eff_interconnect, one GPU
    gather_half_bytes: float
    overhead_s: float
    seq_overhead_s: float
    issue_floor_s: float  # num_layers * eager_layer_issue_s (0: off)
    allreduce_latency_s: float
    host_transfer_latency_s: float
    layer: LayerShape  # one rank's share of a decoder layer
    op_constants: dict  # operators.OP_KEYS
    peak_flops: float  # one GPU, fp16/bf16 tensor (fp32 for float32 models)
    mem_bandwidth: float  # one GPU, datasheet
    vocab_size: int
    allreduce_table: tuple | None  # measured (sizes, seconds) for ``count`` workers, or None
    _layer_s: dict = field(default_factory=dict, compare=False, repr=False)  # tokens -> seconds
    _lm_head_s: dict = field(default_factory=dict, compare=False, repr=False)  # rows -> seconds
    _decode_fixed: dict = field(default_factory=dict, compare=False, repr=False)  # (block size, seqs) -> forward, sampling

    def dense_layer_s(self, tokens: int) -> float:
        """One layer's non-attention time on one rank (``operators``), memoised by token count."""
        t = self._layer_s.get(tokens)
        if t is None:
            t = self._layer_s[tokens] = float(self.layer.layer_s(self.op_constants, self.peak_flops,
                                                                self.mem_bandwidth, tokens))
        return t

    def lm_head_s(self, rows: int) -> float:
        """The vocabulary projection of ``rows`` sampled rows, vocab split over the ranks (memoised)."""
        t = self._lm_head_s.get(rows)
        if t is None:
            t = self._lm_head_s[rows] = 0.0 if not rows else float(gemm_s(
                self.op_constants, self.peak_flops, self.mem_bandwidth, rows, self.layer.hidden,
                self.vocab_size / self.count, self.layer.dtype_bytes))
        return t

    def allreduce_s(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` over the ``count`` ranks."""
        if self.allreduce_table is not None:
            return allreduce.interpolate(*self.allreduce_table, nbytes)
        n = self.count
        return self.allreduce_latency_s + 2.0 * (n - 1) / n * nbytes / self.interconnect_rate

    @classmethod
    def from_configs(cls, model, gpu, system=None, *, geometry: KVGeometry) -> "CostParams":
        """The parameters of ``model`` on ``gpu``; every KV byte count from ``geometry``, the
        model's as the run spec holds it (``kvbench.config.spec.model_geometry``)."""
        _check_model(model)
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_size",
                     "intermediate_size", "vocab_size"):
            _field(model, name, "model")
        for name in ("peak_flops", "mem_bandwidth", "host_bandwidth"):
            _field(gpu, name, "gpu")
        count = gpu_count(gpu)
        dtype_bytes = DTYPE_BYTES[model.dtype]
        layers, h, vocab = int(model.num_layers), int(model.hidden_size), int(model.vocab_size)
        linear = layers * linear_params_per_layer(model)
        # fp32 models run on CUDA cores (PyTorch leaves TF32 matmul off by default).
        peak = float(gpu.peak_flops if dtype_bytes == 2 else _field(gpu, "peak_flops_fp32", "gpu"))
        mem_rate = float(gpu.mem_bandwidth) * gpu_constant(gpu, "eff_bw")
        interconnect = getattr(gpu, "interconnect_bandwidth", None) or gpu.host_bandwidth
        constants = op_constants(gpu)
        return cls(
            count=count,
            num_layers=layers,
            hidden_bytes_per_token=h * dtype_bytes,
            dense_flops_per_token=2.0 * linear,
            lm_head_flops_per_sample=2.0 * vocab * h,
            weight_read_bytes=float((linear + vocab * h) * dtype_bytes),
            attn_flops_per_pair=4.0 * int(model.num_heads) * int(model.head_size) * layers,
            bytes_per_slot=float(geometry.bytes_per_slot),
            segments_per_block=2.0 * layers * int(model.num_kv_heads),
            segments_per_copy_op=2.0 * layers,
            sample_cost_s=(constant(gpu, system, "sample_host_s")
                           + SAMPLING_PASSES * vocab * LOGIT_BYTES / mem_rate),
            flops_rate=peak * constants["gemm_eff_max"],
            attn_flops_rate=peak * gpu_constant(gpu, "eff_attn_flops"),
            mem_rate=mem_rate,
            host_rate=float(gpu.host_bandwidth) * gpu_constant(gpu, "eff_host"),
            interconnect_rate=float(interconnect) * gpu_constant(gpu, "eff_interconnect"),
            gather_half_bytes=gpu_constant(gpu, "gather_half_bytes"),
            overhead_s=constant(gpu, system, "step_overhead_s") + layers * gpu_constant(gpu, "layer_overhead_s"),
            seq_overhead_s=constant(gpu, system, "seq_overhead_s"),
            issue_floor_s=layers * constant(gpu, system, "eager_layer_issue_s"),
            allreduce_latency_s=gpu_constant(gpu, "allreduce_latency_s"),
            host_transfer_latency_s=gpu_constant(gpu, "host_transfer_latency_s"),
            layer=LayerShape.of_model(model, count, dtype_bytes),
            op_constants=constants,
            peak_flops=peak,
            mem_bandwidth=float(gpu.mem_bandwidth),
            vocab_size=vocab,
            allreduce_table=allreduce.table_for(getattr(gpu, "allreduce_table", None), count),
        )


@dataclass(slots=True)
class StepSummary:
    """What the formula needs from a step: counts only, no geometry."""

    block_size: int
    num_tokens: int = 0  # new tokens (K/V computed and written this step)
    num_seqs: int = 0  # chunks in the batch (one per sequence)
    num_sampled: int = 0  # chunks with sample=True (one lm_head row each)
    num_draws: int = 0  # tokens drawn from those rows (num_samples each)
    prefill_pairs: float = 0.0  # causal (query, key) pairs of chunks with more than one token
    prefill_blocks: int = 0  # blocks read by those chunks
    decode_pairs: float = 0.0  # = context lengths of one-token chunks
    decode_blocks: int = 0
    copy_slots: int = 0
    copy_ops: int = 0
    swap_slots: int = 0
    swap_runs: int = 0  # runs of consecutive device slots over all swap ops
    page_maps: int = 0  # vattention page groups mapped / unmapped (see VMM_CALL_S)
    page_unmaps: int = 0


def count_runs(slots) -> int:
    """Maximal runs of consecutive integers in ``slots`` (taken in order)."""
    if not slots:
        return 0
    runs, prev = 1, slots[0]
    for s in slots[1:]:
        if s != prev + 1:
            runs += 1
        prev = s
    return runs


def summarize(batch) -> StepSummary:
    """Count a StepBatch's work: O(copy/swap ops) with the counts the scheduler kept, else O(chunks) more."""
    bs = int(batch.block_size)
    if bs < 1:
        raise ValueError(f"block_size must be >= 1, got {bs}")
    counts = getattr(batch, "counts", None)  # kept by the scheduler as it built the batch
    if counts is None:
        counts = BatchCounts()
        counts.add(batch.chunks, bs)
    s = StepSummary(bs, counts.num_tokens, len(batch.chunks), counts.num_sampled, counts.num_draws,
                    counts.prefill_pairs, counts.prefill_blocks, counts.decode_pairs, counts.decode_blocks)
    return _add_ops(s, batch)


def _add_ops(s: StepSummary, batch) -> StepSummary:
    """Count the batch's copy, page and swap work into ``s``."""
    if batch.copy_ops:
        s.copy_ops = len(batch.copy_ops)
        s.copy_slots = sum(op.length for op in batch.copy_ops)
    s.page_maps = getattr(batch, "page_maps", 0)
    s.page_unmaps = getattr(batch, "page_unmaps", 0)
    for op in batch.swap_out:
        s.swap_slots += len(op.slots)
        s.swap_runs += count_runs(op.slots)
    for op in batch.swap_in:
        s.swap_slots += len(op.slots)
        s.swap_runs += count_runs(op.slots)
    return s


def _attention_bounds(p: CostParams, block_size: int, pairs, blocks):
    """Attention's compute-bound and memory-bound times over ``pairs`` (query, key) pairs read
    from ``blocks`` blocks (numbers, or arrays elementwise)."""
    n = p.count
    gather_per_block = p.segments_per_block * p.gather_half_bytes
    return (pairs * p.attn_flops_per_pair / n / p.attn_flops_rate,
            blocks * (block_size * p.bytes_per_slot + gather_per_block) / n / p.mem_rate)


def step_time(p: CostParams, s: StepSummary) -> dict[str, float]:
    """Modelled time of one step, split by phase (``TIMING_KEYS``) plus ``duration_s`` and the
    work counters behind it (whole model, all GPUs): ``dense_flops``, ``kv_read_bytes``,
    ``copy_bytes``, ``swap_bytes``."""
    n = p.count
    tokens = s.num_tokens

    dense_flops = tokens * p.dense_flops_per_token + s.num_sampled * p.lm_head_flops_per_sample
    forward = 0.0
    if tokens:
        forward = p.num_layers * p.dense_layer_s(tokens) + p.lm_head_s(s.num_sampled)
        if n > 1:  # two all-reduces of the hidden states per layer (Megatron-LM, Sec. 3)
            forward += 2 * p.num_layers * p.allreduce_s(tokens * p.hidden_bytes_per_token)

    bs = s.block_size
    attention = 0.0
    for pairs, blocks in ((s.prefill_pairs, s.prefill_blocks), (s.decode_pairs, s.decode_blocks)):
        if blocks:
            flops_t, bytes_t = _attention_bounds(p, bs, pairs, blocks)
            attention += flops_t if flops_t > bytes_t else bytes_t
    attention += tokens * p.bytes_per_slot / n / p.mem_rate

    sampling = s.num_draws * p.sample_cost_s

    copy = 0.0
    if s.copy_ops:
        moved = s.copy_slots * p.bytes_per_slot + s.copy_ops * p.segments_per_copy_op * p.gather_half_bytes
        copy = 2.0 * moved / n / p.mem_rate

    swap = 0.0
    if s.swap_slots:
        swap = (s.swap_slots * p.bytes_per_slot / n / p.host_rate
                + s.swap_runs * p.segments_per_copy_op * p.host_transfer_latency_s)

    overhead = p.overhead_s + s.num_seqs * p.seq_overhead_s if (tokens or s.copy_ops or s.swap_slots) else 0.0
    if tokens and forward + attention < p.issue_floor_s:  # the GPU waits for an eager host's launches
        overhead += p.issue_floor_s - forward - attention
    # one driver call per layer and K|V tensor for each page group, serialised with the step
    vmm = (s.page_maps + s.page_unmaps) * 2 * p.num_layers * VMM_CALL_S
    overhead += vmm
    return {
        "overhead_s": overhead,
        "forward_s": forward,
        "attention_s": attention,
        "sampling_s": sampling,
        "copy_s": copy,
        "swap_s": swap,
        "duration_s": overhead + forward + attention + sampling + copy + swap,
        "dense_flops": dense_flops,
        "kv_read_bytes": (s.prefill_blocks + s.decode_blocks) * bs * p.bytes_per_slot,
        "copy_bytes": s.copy_slots * p.bytes_per_slot,
        "swap_bytes": s.swap_slots * p.bytes_per_slot,
    }


def decode_run_times(p: CostParams, block_size: int, num_seqs: int, decode_pairs: Sequence[int],
                     decode_blocks: Sequence[int]) -> dict[str, list[float]]:
    """``step_time`` of each step of a decode run: every step ``num_seqs`` one-token sampling
    chunks reading ``decode_pairs[j]`` context tokens in ``decode_blocks[j]`` blocks, no prefill,
    copy, swap or page work. The same operations in the same order as ``step_time`` applies to
    such a step, so each value is bit for bit step_time's (the constant terms come from
    ``step_time`` itself; ``tests/test_decode_runs.py`` holds them equal). Plain floats, step by
    step: a run is a few steps, for which numpy's per-call cost outweighs the arithmetic."""
    n, tokens = p.count, num_seqs
    known = p._decode_fixed.get((block_size, tokens))
    if known is None:
        fixed = step_time(p, StepSummary(block_size, tokens, tokens, tokens, tokens, 0, 0, 0, 0))
        known = p._decode_fixed[block_size, tokens] = fixed["forward_s"], fixed["sampling_s"]
    forward, sampling = known
    base_overhead = p.overhead_s + tokens * p.seq_overhead_s
    new_kv = tokens * p.bytes_per_slot / n / p.mem_rate
    floor = p.issue_floor_s
    # _attention_bounds' terms, inline
    flops_per_pair, flops_rate, mem_rate = p.attn_flops_per_pair, p.attn_flops_rate, p.mem_rate
    bytes_per_block = block_size * p.bytes_per_slot + p.segments_per_block * p.gather_half_bytes
    overheads, attentions, durations = [], [], []
    for pairs, blocks in zip(decode_pairs, decode_blocks):
        flops_t, bytes_t = pairs * flops_per_pair / n / flops_rate, blocks * bytes_per_block / n / mem_rate
        attention = (flops_t if flops_t > bytes_t else bytes_t) + new_kv
        overhead = base_overhead + (floor - forward - attention) if forward + attention < floor else base_overhead
        overheads.append(overhead)
        attentions.append(attention)
        durations.append(overhead + forward + attention + sampling + 0.0 + 0.0)
    k = len(durations)
    return {"overhead_s": overheads, "forward_s": [forward] * k, "attention_s": attentions,
            "sampling_s": [sampling] * k, "copy_s": [0.0] * k, "swap_s": [0.0] * k, "duration_s": durations}


def batch_time(model, gpu, batch, system=None, *, geometry: KVGeometry) -> dict[str, float]:
    """Convenience for one-off use: ``step_time`` of a StepBatch from configs."""
    return step_time(CostParams.from_configs(model, gpu, system, geometry=geometry), summarize(batch))


def describe(model, gpu, *, geometry: KVGeometry) -> str:
    """One line for logs: weight-read time per step and where the dense part turns compute bound."""
    p = CostParams.from_configs(model, gpu, geometry=geometry)
    weight_s = p.weight_read_bytes / p.count / p.mem_rate
    ridge_tokens = weight_s * p.count * p.flops_rate / p.dense_flops_per_token
    return (f"{getattr(model, 'name', '?')} on {p.count} x {getattr(gpu, 'name', '?')}: "
            f"weights read in {weight_s * 1e3:.2f} ms per step; "
            f"dense part compute bound above {math.ceil(ridge_tokens)} tokens per step")
