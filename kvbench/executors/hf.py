"""Real executor (``backend=hf``): transformers models on the engine's paged KV pool, CPU or CUDA.

Each step runs one forward of a packed batch: the new tokens of every sequence in a row
(input_ids [1, T], position_ids [1, T], no padding). Attention goes through transformers'
attention registry to ``kvbench.hf.attention``: the new K/V are stored at the allocator's slot
mapping and read back through block tables by the kernels (``engine.attention``: ``triton``, or
``torch``: by default the step-vectorised torch path of ``kvbench.hf.torch_attention``, or the
kernels' torch reference with ``backend.torch_attention=reference``; ``auto``: triton on CUDA,
torch on the CPU). Every layer must call the hook (checked each step). The forward is the whole
model's (its prediction head, final norms, logit scaling and soft-capping included), with
``logits_to_keep`` naming the rows the step samples, so logits are computed only for those (a
model whose forward lacks ``logits_to_keep`` computes all rows and keeps those). Before the
forward, swap-outs, the allocator's copy ops and swap-ins run on the pool, in that order.

Timings of a step (``StepResult.timings``; wall time, synchronised on CUDA): ``attention_s`` (inside
the attention hook: store + paged attention, summed over layers), ``forward_s`` (the rest of the
forward, the LM head on the sampled rows included), ``sampling_s``, ``copy_s``, ``swap_s``; and
``duration_s``, the whole ``execute`` (input building included). With ``engine.clock=virtual`` the
tokens are the same but ``duration_s`` and the timings are the sim cost model's for the step on
the gpu profile, so a run's schedule does not depend on the machine's load.

At construction one probe forward reads every layer's attention features (``kvbench.hf.features``):
a model whose attention the hook cannot reproduce exactly is refused there, before any step, and
the layers' sliding windows, KV heads and K/V head sizes must equal the config's geometry.

MLA models (``model.kv_lora_rank``) reach the hook with K and V expanded per head, so the pool
stores those (``KVGeometry.pool_bytes_per_slot``), not the compressed latent that
``KVGeometry.bytes_per_slot`` counts and the sim sizes pools by: the pool's tensors are larger
than ``kv_bytes`` by that ratio (a derived ``kv_cache_bytes`` is scaled down to fit the device).

Mixed models on an allocator whose layer groups keep tables of their own (``kv_layout``: the
allocator's ``attention_layout``, two groups or more): one KV tensor per group
(``kvbench.hf.group_pool``), each layer storing and attending through its group's table and slots
(``StepBatch.group_tables``). Copy ops, swaps and the host tier move one table's slots, so a
step that asks for them is refused there (the pre-check allows only recompute preemption).
"""
from __future__ import annotations

import inspect
import logging
import time

import kvbench.hf  # noqa: F401  (HF_HUB_OFFLINE before transformers)
import numpy as np
import torch

from kernels import get_ops
from kvbench.batch import StepBatch, StepResult
from kvbench.config.errors import ConfigError
from kvbench.geometry import KVGeometry
from kvbench.hf.attention import LayerTimer, StepAttention, register, step_attention
from kvbench.hf.features import check_shapes, check_windows
from kvbench.hf.group_pool import GroupedKVPools, grouped_pool_bytes, layer_groups_of
from kvbench.hf.probe import probe_layers
from kvbench.hf.model import DTYPES, build_model
from kvbench.hf.host_tier import HostTierPool
from kvbench.hf.pool import KVPool
from kvbench.hf.sampling import Sampler, SamplingParams
from kvbench.hf.torch_attention import TorchAttentionPlan
from kvbench.hf.cost_view import cost_params
from kvbench.sim.cost_model import TIMING_KEYS, step_time, summarize

log = logging.getLogger(__name__)

CPU_DEFAULT_KV_BYTES = 256 * 2**20  # engine.kv_cache_bytes=null on the CPU: 256 MiB at most
CUDA_RESERVED_BYTES = 1 * 2**30  # CUDA: left free for activations, logits and the allocator's slack
TORCH_ATTENTION_PATHS = ("batched", "reference")  # backend.torch_attention, for engine.attention=torch


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without a GPU is a ConfigError."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("engine.device=cuda but torch sees no CUDA device (use auto or cpu)")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"engine.device must be one of auto, cpu, cuda; got {device!r}")
    return device


def default_kv_cache_bytes(cfg, device: str, geometry: KVGeometry) -> int:
    """KV bytes when engine.kv_cache_bytes is null, for the model's ``geometry`` (the run spec's).

    CUDA: engine.kv_cache_fraction of (free device memory - the model's weights, which are not
    loaded yet - CUDA_RESERVED_BYTES). CPU: CPU_DEFAULT_KV_BYTES, capped by what the engine can
    ever use (max_num_seqs sequences of max_model_len tokens).
    """
    most_useful = geometry.bytes_per_slot * int(cfg.model.max_model_len) * int(cfg.engine.max_num_seqs)
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        weights = int(cfg.model.num_params) * geometry.dtype_bytes
        available = free - weights - CUDA_RESERVED_BYTES
        if available <= 0:
            raise ConfigError(f"model {cfg.model.name}: its weights ({weights / 2**30:.1f} GiB) leave no free GPU "
                              f"memory for a KV pool ({free / 2**30:.1f} GiB free); set engine.kv_cache_bytes")
        budget = min(available * float(cfg.engine.kv_cache_fraction), most_useful)
    else:
        budget = min(CPU_DEFAULT_KV_BYTES, most_useful)
    if geometry.pool_bytes_per_slot != geometry.bytes_per_slot:  # MLA: the pool holds more than the latent
        return int(budget * geometry.bytes_per_slot // geometry.pool_bytes_per_slot)
    return int(budget)


def virtual_clock(model_cfg, engine_cfg, gpu_cfg, system_cfg=None, *, geometry: KVGeometry):
    """The cost-model parameters of ``engine.clock=virtual`` (None for ``wall``): the sim backend's,
    for the same gpu profile and system (MoE and two-matrix-MLP families through
    ``kvbench.hf.cost_view``) and the model's ``geometry``."""
    clock = str(engine_cfg.get("clock", "wall") or "wall") if engine_cfg is not None else "wall"
    if clock == "wall":
        return None
    if clock != "virtual":
        raise ConfigError(f"engine.clock must be one of wall, virtual; got {clock!r}")
    if gpu_cfg is None:
        raise ConfigError("engine.clock=virtual needs a gpu profile (gpu=...) for the step cost model")
    try:
        return cost_params(model_cfg, gpu_cfg, system_cfg, geometry=geometry)
    except ValueError as exc:
        raise ConfigError(f"engine.clock=virtual: {exc}") from None


class HFExecutor:
    """Runs StepBatches through a transformers causal LM on a paged KV pool of ``num_slots`` slots;
    ``geometry``: the model's (the run spec's), which the probe checks the model against."""

    needs_block_tables = True

    def __init__(self, model_cfg, engine_cfg, *, num_slots: int, block_size: int, geometry: KVGeometry,
                 device: str = "auto", seed: int = 0, backend_cfg=None, model=None, gpu_cfg=None,
                 system_cfg=None, kv_layout: list[tuple] | None = None) -> None:
        self.device = resolve_device(device)
        self.cost = virtual_clock(model_cfg, engine_cfg, gpu_cfg, system_cfg, geometry=geometry)
        self.cuda = self.device == "cuda"
        threads = engine_cfg.get("threads") if engine_cfg is not None else None
        if threads and not self.cuda:
            torch.set_num_threads(int(threads))
        if num_slots < block_size or num_slots < 1:
            raise ConfigError(
                f"model {model_cfg.name}: the KV pool holds {num_slots} slots ({geometry.bytes_per_slot} bytes each), "
                f"fewer than one block of {block_size}; raise engine.kv_cache_bytes")
        if num_slots < int(model_cfg.max_model_len):
            log.warning("KV pool of %d slots is shorter than max_model_len %d: longer requests are rejected",
                        num_slots, int(model_cfg.max_model_len))
        self.num_layers = geometry.num_layers
        self.block_size = int(block_size)
        self.num_slots = int(num_slots)
        attention = str(engine_cfg.get("attention", "torch")) if engine_cfg is not None else "torch"
        if attention == "auto":
            attention = "triton" if self.cuda else "torch"
        torch_path = str(backend_cfg.get("torch_attention", "batched")) if backend_cfg is not None else "batched"
        if torch_path not in TORCH_ATTENTION_PATHS:
            raise ConfigError(f"backend.torch_attention must be one of {', '.join(TORCH_ATTENTION_PATHS)}; "
                              f"got {torch_path!r}")
        self.ops = get_ops(attention)
        self.batched_torch = attention == "torch" and torch_path == "batched"
        self.model = model if model is not None else build_model(model_cfg, device=self.device, seed=int(seed))
        self.model.set_attn_implementation(register())
        # every layer's attention features, refused here (before any step) when the hook cannot honour them
        budget = engine_cfg.get("max_num_batched_tokens") if engine_cfg is not None else None
        probe = probe_layers(self.model, geometry.num_layers, int(model_cfg.max_model_len),
                             None if budget is None else int(budget))
        self.layers = [probe.layers[layer] for layer in range(geometry.num_layers)]
        check_windows(self.layers, geometry.windows, str(model_cfg.name))
        check_shapes(probe, geometry.num_kv_heads, geometry.head_size, geometry.value_head_size, str(model_cfg.name))
        self.keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        if geometry.latent_size is not None:
            log.warning("model %s (MLA): the hf pool stores K/V expanded per head, %d bytes per slot, %.1fx the "
                        "%d bytes of the latent the metrics count", model_cfg.name, geometry.pool_bytes_per_slot,
                        geometry.pool_bytes_per_slot / geometry.bytes_per_slot, geometry.bytes_per_slot)
        self.grouped: GroupedKVPools | None = None  # a KV pool per layer group (kv_layout of two groups or more)
        if kv_layout is not None and len(kv_layout) > 1:
            layer_group = layer_groups_of(geometry.windows, geometry.num_layers, kv_layout)
            self._check_grouped_bytes(kv_layout, layer_group, geometry, str(model_cfg.name))
            self.grouped = GroupedKVPools(
                layout=list(kv_layout), layer_group=layer_group, block_size=self.block_size,
                num_kv_heads=geometry.num_kv_heads, head_size=geometry.head_size, v_head_size=geometry.value_head_size,
                dtype=DTYPES[geometry.dtype], device=self.device)
            self.pool = self.grouped.pools[0]
        else:
            self.pool = KVPool(num_layers=geometry.num_layers, num_slots=self.num_slots, block_size=self.block_size,
                               num_kv_heads=geometry.num_kv_heads, head_size=geometry.head_size,
                               v_head_size=geometry.value_head_size, dtype=DTYPES[geometry.dtype], device=self.device)
        self.host_tier: HostTierPool | None = None  # the offload host tier's real K/V (attach_host_tier)
        self.sampler = Sampler(SamplingParams.from_cfg(backend_cfg), seed=int(seed))
        self.timer = LayerTimer(self.cuda)

    def _check_grouped_bytes(self, layout, layer_group: list[int], geometry: KVGeometry, name: str) -> None:
        """The per-group tensors hold a block for every id a group may name: more than the run's KV bytes
        (warned); on CUDA refused when they would not fit the free device memory."""
        layer_bytes = geometry.pool_bytes_per_slot // geometry.num_layers
        grouped = grouped_pool_bytes(layout, layer_group, self.block_size, layer_bytes)
        books = self.num_slots * geometry.pool_bytes_per_slot
        if grouped > books:
            log.warning("model %s: the hf per-layer-group KV tensors take %d bytes, %.1fx the %d bytes of the "
                        "allocator's books (every group has room for every block id it may name)", name, grouped,
                        grouped / books, books)
        if self.cuda and grouped > torch.cuda.mem_get_info()[0] - CUDA_RESERVED_BYTES:
            raise ConfigError(f"model {name}: the per-layer-group KV tensors need {grouped / 2**30:.1f} GiB "
                              f"({grouped / books:.1f}x engine.kv_cache_bytes), more than the free GPU memory; "
                              f"lower engine.kv_cache_bytes")

    def stop_token_ids(self, model_cfg) -> tuple[int, ...]:
        """EOS ids for workload.ignore_eos=false: model.eos_token_id (an id or a list), else the loaded
        model's generation config (pretrained weights); () when neither names one (dummy weights)."""
        value = model_cfg.get("eos_token_id") if hasattr(model_cfg, "get") else None
        if value is None:
            generation = getattr(self.model, "generation_config", None)
            value = getattr(generation, "eos_token_id", None) if str(model_cfg.get("load", "dummy")) == "pretrained" \
                else None
        if value is None:
            return ()
        return tuple(int(v) for v in (value if hasattr(value, "__iter__") else [value]))

    def attach_host_tier(self, num_chunks: int, chunk_blocks: int) -> None:
        """Hold the offload host tier's chunks in host memory (pinned with CUDA); the engine passes
        the tier's copies on each batch (``StepBatch.tier_copies``)."""
        if self.grouped is not None:
            raise ConfigError("the offload host tier moves one block table's slots; a mixed model's layer groups "
                              "keep a table each on backend=hf")
        self.host_tier = HostTierPool(self.pool, num_chunks, chunk_blocks)

    # -- one step --------------------------------------------------------------------------------
    def execute(self, batch: StepBatch) -> StepResult:
        t_start = time.perf_counter()
        if batch.block_size != self.block_size:
            raise ValueError(f"batch block_size {batch.block_size} differs from the pool's {self.block_size}")
        timings = dict.fromkeys(("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s"), 0.0)
        if self.grouped is not None and (batch.copy_ops or batch.swap_out or batch.swap_in or batch.tier_copies):
            raise RuntimeError("copy ops, swaps and host-tier copies name one layer group's slots; the hf executor "
                               "does not move a mixed model's per-group K/V")
        with torch.inference_mode():
            if batch.tier_copies:  # host tier stores and drops: before anything writes a block
                t = self._now()
                self.host_tier.apply(batch.tier_copies, "before")
                timings["swap_s"] += self._now() - t
            if batch.swap_out:
                t = self._now()
                for op in batch.swap_out:
                    self.pool.swap_out(op)
                timings["swap_s"] += self._now() - t
            if batch.copy_ops:
                t = self._now()
                self.pool.copy(batch.copy_ops, self.ops.copy_slots)
                timings["copy_s"] = self._now() - t
            if batch.swap_in:
                t = self._now()
                for op in batch.swap_in:
                    self.pool.swap_in(op)
                timings["swap_s"] += self._now() - t
            if batch.tier_copies:  # host tier loads into the fresh blocks of this step's admissions
                t = self._now()
                self.host_tier.apply(batch.tier_copies, "after")
                timings["swap_s"] += self._now() - t
            next_tokens, extra, top = {}, {}, {}
            if batch.chunks:
                step, input_ids, positions, sample_rows, sampled = self._inputs(batch)
                t = self._now()
                self.timer.reset()
                with step_attention(step):
                    logits = self._logits(input_ids, positions, sample_rows)
                if step.calls != self.num_layers:
                    raise RuntimeError(f"{type(self.model).__name__}: {step.calls} of {self.num_layers} layers called "
                                       "the paged attention hook; this model does not route attention through "
                                       "transformers' AttentionInterface")
                t_forward = self._now()
                attention_s = self.timer.total_s()
                timings["attention_s"] = attention_s
                timings["forward_s"] = t_forward - t - attention_s
                if sampled:
                    next_tokens, extra, top = self.sampler(logits, sampled)
                timings["sampling_s"] = self._now() - t_forward
        duration = time.perf_counter() - t_start
        if self.cost is not None:  # engine.clock=virtual: the modelled time of this step on the gpu profile
            modelled = step_time(self.cost, summarize(batch))
            duration = modelled["duration_s"]
            timings = {key: modelled[key] for key in TIMING_KEYS}
        return StepResult(next_tokens=next_tokens, duration_s=duration, top_logprobs=top, extra_tokens=extra,
                          timings=timings)

    def _logits(self, input_ids: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The model's own logits [len(rows), vocab] of the packed step's ``rows``."""
        if self.keeps_logits:
            return self.model(input_ids=input_ids, position_ids=positions, use_cache=False,
                              logits_to_keep=rows).logits[0]
        return self.model(input_ids=input_ids, position_ids=positions, use_cache=False).logits[0, rows]

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _inputs(self, batch: StepBatch):
        """The packed step: StepAttention, input_ids [1, T], position_ids [1, T], the sampled rows and chunks."""
        chunks = batch.chunks
        bs = self.block_size
        num_seqs = len(chunks)
        token_ids: list[int] = []
        slots: list[int] = []
        starts = np.empty(num_seqs + 1, dtype=np.int64)
        starts[0] = 0
        context = np.empty(num_seqs, dtype=np.int64)
        sample_rows: list[int] = []
        sampled = []
        width = max(-(-c.context_len // bs) for c in chunks)
        tables = np.zeros((num_seqs, width), dtype=np.int32)
        for i, c in enumerate(chunks):
            token_ids += c.token_ids
            slots += c.slot_mapping
            starts[i + 1] = starts[i] + len(c.token_ids)
            context[i] = c.context_len
            needed = -(-c.context_len // bs)
            tables[i, :needed] = c.block_table[:needed]
            if c.sample:
                sample_rows.append(int(starts[i + 1]) - 1)
                sampled.append(c)
        # positions: context - query_len + arange(query_len) per sequence, vectorised
        q_lens = np.diff(starts)
        positions = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1] - (context - q_lens), q_lens)
        dev = self.device
        host = {
            "input_ids": torch.tensor(token_ids, dtype=torch.int64).view(1, -1),
            "positions": torch.from_numpy(positions).view(1, -1),
            "slots": torch.tensor(slots, dtype=torch.int64),
            "tables": torch.from_numpy(tables),
            "context": torch.from_numpy(context.astype(np.int32)),
            "starts": torch.from_numpy(starts.astype(np.int32)),
            "rows": torch.tensor(sample_rows, dtype=torch.int64),
        }
        if self.cuda:
            host = {k: v.pin_memory().to(dev, non_blocking=True) for k, v in host.items()}
        plan = None
        if self.batched_torch and self.grouped is None:
            plan = TorchAttentionPlan(starts=starts, context=context, tables=tables, block_size=bs,
                                      num_kv_heads=self.pool.key_caches[0].shape[2], device=torch.device(dev))
        key_caches, value_caches, layer_tables = self.pool.key_caches, self.pool.value_caches, None
        if self.grouped is not None:
            key_caches, value_caches = self.grouped.key_caches, self.grouped.value_caches
            layer_tables = self._group_tables(batch, context, q_lens, positions)
        step = StepAttention(
            key_caches=key_caches, value_caches=value_caches, slot_mapping=host["slots"],
            block_tables=host["tables"], context_lens=host["context"], query_start_loc=host["starts"],
            store_kv=self.ops.store_kv, paged_attention=self.ops.paged_attention, timer=self.timer, plan=plan,
            layer_tables=layer_tables)
        return step, host["input_ids"], host["positions"], host["rows"], sampled

    def _group_tables(self, batch: StepBatch, context: np.ndarray, q_lens: np.ndarray, positions: np.ndarray):
        """Per layer, its layer group's (slot mapping, block tables, torch plan or None) of this step."""
        if batch.group_tables is None:
            raise ValueError("a mixed model's step needs every layer group's block tables (StepBatch.group_tables)")
        seq_ids = [c.seq_id for c in batch.chunks]
        dev = torch.device(self.device)
        starts = np.concatenate(([0], np.cumsum(q_lens)))
        per_group = []
        for tables, slots in self.grouped.step_tables(seq_ids, batch.group_tables, context, q_lens, positions):
            plan = None
            if self.batched_torch:
                plan = TorchAttentionPlan(starts=starts, context=context, tables=tables, block_size=self.block_size,
                                          num_kv_heads=self.pool.key_caches[0].shape[2], device=dev)
            per_group.append((torch.from_numpy(slots).to(dev), torch.from_numpy(tables).to(dev), plan))
        return [per_group[g] for g in self.grouped.layer_group]
