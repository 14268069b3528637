"""Which allocators a mixed model may use, and the layer-group knobs the grouped ones take.

``uniform``, ``hybrid_static``, ``hybrid`` and ``lcm`` get the model's layer groups (``groups``,
from ``kvbench.layer_groups``) and ``slot_bytes`` (the bytes of one pool slot, so that every
strategy of a run holds the same KV bytes). On a uniform model they page exactly as ``paged``.
A model with state layers (Mamba, linear attention) runs only on them (the others have no place
for a request's state); ``paged_window`` needs a model whose every layer slides alike. Mixed
models run on backend=sim with recompute preemption only (the hf attention and swap read one
block table).
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
        raise ConfigError(hf_refusal(name, model, kinds))
    if mixed and str(cfg.engine.preemption) != "recompute":
        raise ConfigError(f"allocator {name} on the mixed model {model.name} needs engine.preemption=recompute")
    knobs["groups"] = [list(g.spec()) for g in layer_groups(model)]
    knobs["slot_bytes"] = geometry.bytes_per_slot
    knobs["prefill_chunk"] = int(cfg.engine.max_num_batched_tokens)
    if name == "hybrid_static":
        knobs.setdefault("max_model_len", int(model.max_model_len))


def hf_refusal(name: str, model, kinds: set[str]) -> str:
    """Why the hf backend cannot run a grouped allocator on a mixed model (one line)."""
    family = model.get("family") or "?"
    why = "the hf attention reads one block table per sequence, not one per layer group"
    if "state" in kinds:
        why += ("; and its state layers (Mamba / linear attention / short convolution) would need their own "
                "recurrent update per request from the engine's state slots, which the hf executor does not run")
    return (f"allocator {name} on the mixed model {model.name} ({family}: {', '.join(sorted(kinds))} groups) "
            f"runs on backend=sim only: {why}")
