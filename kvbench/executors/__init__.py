"""Executors: run one StepBatch and say what came out and how long it took.

``hf`` runs a real forward (cpu or cuda); ``sim`` models the time on a named GPU. Each is
imported only when chosen, so ``sim`` needs neither torch nor transformers.
"""
from __future__ import annotations

import importlib

EXECUTORS: dict[str, str] = {
    "hf": "kvbench.executors.hf:HFExecutor",
    "sim": "kvbench.executors.sim:SimExecutor",
}


def build_executor(backend: str, **kwargs):
    """Instantiate the executor of ``backend`` with ``kwargs`` (e.g. model_cfg, gpu_cfg, seed)."""
    target = EXECUTORS.get(backend)
    if target is None:
        raise ValueError(f"backend must be one of {sorted(EXECUTORS)}, got {backend!r}")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)(**kwargs)
