"""The real engines' own KV managers behind kvbench's allocator seam (optional extra ``peers``).

``PEERS`` names each adapter; ``build_peer`` imports it only when a run asks for it, so kvbench
runs without the engines installed and says how to get them when one is asked for.
"""
from __future__ import annotations

import importlib

from allocators.base import Allocator, AllocatorError

# config name -> (module, class, the package it drives)
PEERS: dict[str, tuple[str, str, str]] = {
    "vllm-v1": ("kvbench.peers.vllm_v1", "VllmV1Allocator", "vllm"),
}


def peer_class(name: str) -> type[Allocator]:
    """The adapter class of ``name``; AllocatorError (one line) when its engine is not installed."""
    module, cls, package = PEERS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise AllocatorError(f"allocator {name} needs the optional extra 'peers' ({package} is not importable: "
                             f"{exc.msg}); run `make peers`") from None


def build_peer(name: str, num_slots: int, **knobs) -> Allocator:
    return peer_class(name)(num_slots, **knobs)
