"""The paged-attention hook, registered in transformers' attention-function registry.

Every decoder layer of a model whose ``config._attn_implementation`` is ``ATTN_NAME`` calls
``paged_attention_forward`` with its query/key/value of the packed step ([1, heads, T, head_size],
V's head size may differ from K's (MLA); positions already applied: RoPE rotated, OPT's learned
positions added before the layer). The hook
stores the new tokens' K and V at the step's slot mapping (``store_kv``) and attends through the
block tables (``paged_attention``), or, for ``engine.attention=torch`` with the default
``backend.torch_attention=batched``, does the same with the step-vectorised torch path of
``kvbench.hf.torch_attention``. The step's index tensors and pool live in a ``StepAttention``
that the executor installs for the duration of one forward (``with step_attention(step): ...``);
the registry has no mask function for this name, so transformers builds no attention mask.

Each call's features (scale, per-layer sliding window, logit soft-cap) are read by
``kvbench.hf.features.read_layer``, which refuses anything else; with an ``AttentionProbe``
installed instead of a step, the hook only records them (``probe.probe_layers``).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import kvbench.hf  # noqa: F401
import torch

from kvbench.hf import torch_attention
from kvbench.hf.features import AttentionProbe, read_layer
from kvbench.hf.torch_attention import TorchAttentionPlan

ATTN_NAME = "kvbench_paged"


class LayerTimer:
    """Sums the wall time spent inside the hook over one forward: ``perf_counter`` on the CPU,
    CUDA events on a GPU (read after the step's final synchronisation, so no sync per layer)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._used = 0
        self._cpu_s = 0.0
        self._t0 = 0.0

    def reset(self) -> None:
        self._used = 0
        self._cpu_s = 0.0

    def start(self) -> None:
        if self.cuda:
            if self._used == len(self._events):
                self._events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            self._events[self._used][0].record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self._events[self._used][1].record()
            self._used += 1
        else:
            self._cpu_s += time.perf_counter() - self._t0

    def total_s(self) -> float:
        """Seconds inside the hook since ``reset`` (CUDA: call after synchronising)."""
        if self.cuda:
            return sum(a.elapsed_time(b) for a, b in self._events[:self._used]) / 1e3
        return self._cpu_s


@dataclass(slots=True)
class StepAttention:
    """What every layer's attention needs in one step (all on the pool's device)."""

    key_caches: list[torch.Tensor]  # per layer [num_blocks, block_size, Hkv, D]
    value_caches: list[torch.Tensor]
    slot_mapping: torch.Tensor  # [T] int64: pool slot of each new token
    block_tables: torch.Tensor  # [B, max_blocks] int32
    context_lens: torch.Tensor  # [B] int32: tokens of each sequence including this step's
    query_start_loc: torch.Tensor  # [B + 1] int32
    store_kv: object  # kernels' store_kv
    paged_attention: object  # kernels' paged_attention
    timer: LayerTimer
    plan: TorchAttentionPlan | None = None  # set: the batched torch path instead of the kernels
    calls: int = field(default=0)
    # per layer (slot_mapping, block_tables, plan) of its layer group, when the groups keep tables of their
    # own (kvbench.hf.group_pool); None: every layer reads the fields above
    layer_tables: list[tuple] | None = None


_active: StepAttention | None = None


@contextlib.contextmanager
def step_attention(step: StepAttention):
    """Install ``step`` as the attention state of the forward run inside the block."""
    global _active
    previous, _active = _active, step
    try:
        yield step
    finally:
        _active = previous


def paged_attention_forward(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function: query [1, Hq, T, D], key [1, Hkv, T, D], value [1, Hkv, T, Dv] of
    the packed step -> ([1, T, Hq, Dv], None)."""
    step = _active
    if step is None:
        raise RuntimeError(f"attention {ATTN_NAME!r} ran outside an executor step (no block tables installed)")
    if query.shape[0] != 1:
        raise ValueError(f"{ATTN_NAME} attention takes one packed batch row, got batch {query.shape[0]}")
    layer = module.layer_idx
    features = read_layer(module, query, scaling, dropout, kwargs, attention_mask)
    if isinstance(step, AttentionProbe):
        step.record(layer, features, key, value)
        return query.new_zeros((1, query.shape[2], query.shape[1], value.shape[-1])), None
    step.timer.start()
    q = query[0].transpose(0, 1)  # [T, Hq, D], stride(-1) == 1
    k = key[0].transpose(0, 1)  # [T, Hkv, D]
    v = value[0].transpose(0, 1)
    key_cache, value_cache = step.key_caches[layer], step.value_caches[layer]
    out = torch.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype, device=q.device)
    slot_mapping, block_tables, plan = step.slot_mapping, step.block_tables, step.plan
    if step.layer_tables is not None:
        slot_mapping, block_tables, plan = step.layer_tables[layer]
    if plan is not None:
        torch_attention.store_kv(k, v, key_cache, value_cache, slot_mapping)
        torch_attention.attention(plan, query[0], key[0], value[0], key_cache, value_cache, features.scale, out,
                                  window=features.window, softcap=features.softcap)
    else:
        step.store_kv(k, v, key_cache, value_cache, slot_mapping)
        step.paged_attention(q, key_cache, value_cache, block_tables, step.context_lens,
                             step.query_start_loc, features.scale, out=out, window=features.window,
                             softcap=features.softcap)
    step.timer.stop()
    step.calls += 1
    return out.unsqueeze(0), None


def register() -> str:
    """Register the hook under ``ATTN_NAME`` (idempotent); returns the name."""
    from transformers import AttentionInterface  # start-up time: transformers' modeling code, loaded when a model is built, not when the pre-check imports the executor

    AttentionInterface.register(ATTN_NAME, paged_attention_forward)
    return ATTN_NAME
