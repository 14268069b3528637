"""Which allocators a mixed model may use, and the layer-group knobs the grouped ones take.

``uniform``, ``hybrid_static``, ``hybrid`` and ``lcm`` get the model's layer groups (``groups``,
from ``kvbench.layer_groups``) and ``slot_bytes`` (the bytes of one pool slot, so that every
strategy of a run holds the same KV bytes). On a uniform model they page exactly as ``paged``.
A model with state layers (Mamba, linear attention) runs only on them (the others have no place
for a request's state); ``paged_window`` needs a model whose every layer slides alike. Mixed
models need recompute preemption (swap moves one block table). On backend=hf (one KV tensor per
layer group, each layer reading its group's table: ``kvbench.hf.group_pool``) a mixed model of
full and sliding-window layers of one shape runs, with one sample per request (a fork's
copy-on-write names one group's slots); a family the hf attention cannot run is refused by name
(``hf_refusal``): state layers, chunked attention, per-group head shapes, attention sinks.
"""
from __future__ import annotations

from omegaconf import DictConfig

from allocators import GROUPED
from kvbench.config.errors import ConfigError
from kvbench.geometry import KVGeometry
from kvbench.layer_groups import layer_groups


def group_knobs(cfg: DictConfig, geometry: KVGeometry, knobs: dict) -> None:
    """Check the allocator against the model's layer groups; add the grouped allocators' knobs."""
    name, model = str(cfg.allocator.name), cfg.model
    mixed = bool(geometry.groups)
    kinds = {g.kind for g in geometry.groups}
    if name == "paged_window" and mixed:
        raise ConfigError(f"allocator paged_window: model {model.name} mixes layer kinds ({', '.join(sorted(kinds))}); "
                          f"use allocator uniform, hybrid_static, hybrid or lcm")
    if name not in GROUPED:
        if "state" in kinds:
            raise ConfigError(f"allocator {name}: model {model.name} has state layers (Mamba / linear attention) "
                              f"that it cannot hold; use allocator {', '.join(GROUPED)}")
        return
    if mixed and cfg.backend.name != "sim":
        refusal = hf_mixed_refusal(cfg, geometry)
        if refusal is not None:
            raise ConfigError(refusal)
        workload = cfg.get("workload") or {}
        if int(workload.get("n", 1) or 1) > 1 or int(workload.get("beam_width", 1) or 1) > 1:
            raise ConfigError(f"allocator {name} on the mixed model {model.name} runs on backend=hf with "
                              f"workload.n=1 and workload.beam_width=1 only (a fork's copy-on-write moves one "
                              f"layer group's slots)")
    if mixed and str(cfg.engine.preemption) != "recompute":
        raise ConfigError(f"allocator {name} on the mixed model {model.name} needs engine.preemption=recompute")
    knobs["groups"] = [list(g.spec()) for g in layer_groups(model)]
    knobs["slot_bytes"] = geometry.bytes_per_slot
    knobs["prefill_chunk"] = int(cfg.engine.max_num_batched_tokens)
    if name == "hybrid_static":
        knobs.setdefault("max_model_len", int(model.max_model_len))


ATTENTION_SINK_FAMILIES = ("gpt_oss",)  # a learned per-head logit in every softmax


def hf_mixed_refusal(cfg: DictConfig, geometry: KVGeometry) -> str | None:
    """``hf_refusal`` of the run's grouped allocator on its mixed model; None for another allocator
    or a uniform model. The hf pre-check asks it before the family list (most of these families
    are not hf families at all, and the reason is what the user needs)."""
    name = str(cfg.allocator.name)
    if name not in GROUPED or not geometry.groups:
        return None
    return hf_refusal(name, cfg.model, {g.kind for g in geometry.groups})


def hf_refusal(name: str, model, kinds: set[str]) -> str | None:
    """Why the hf backend cannot run a grouped allocator on a mixed model (one line); None: it can."""
    family = model.get("family") or "?"
    shapes = [(model.get(f"full_{key}"), model.get(key)) for key in ("num_kv_heads", "head_size")]
    if "state" in kinds:
        why = ("its state layers (Mamba / linear attention / short convolution) would need their own recurrent "
               "update per request from the engine's state slots, which the hf executor does not run")
    elif "chunked" in kinds:
        why = "the hf attention has no chunked-attention mask (attention within chunks of attention_chunk_size tokens)"
    elif any(full is not None and full != other for full, other in shapes):
        why = ("its full and sliding layers differ in KV heads or head size (model.full_num_kv_heads / "
               "full_head_size), and the hf pool holds one shape for every layer")
    elif family in ATTENTION_SINK_FAMILIES:
        why = "its attention sinks (a learned logit per head in every softmax) are not implemented by the paged hook"
    else:
        return None
    return (f"allocator {name} on the mixed model {model.name} ({family}: {', '.join(sorted(kinds))} groups) "
            f"runs on backend=sim only: {why}")
