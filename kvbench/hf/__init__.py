"""Pieces of the ``hf`` executor: model building, the paged-attention hook, the KV pool, sampling.

``kvbench.executors.hf.HFExecutor`` puts them together. Importing this package sets
HF_HUB_OFFLINE=1 (unless the caller set it) before transformers is imported: nothing is fetched
from a hub at run time.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
