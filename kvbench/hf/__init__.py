"""Pieces of the ``hf`` executor: model building, the paged-attention hook, the KV pool, sampling.

``kvbench.executors.hf.HFExecutor`` puts them together. Importing this package sets, unless the
caller already did:

- HF_HUB_OFFLINE=1 before transformers is imported: nothing is fetched from a hub at run time;
- OMP_WAIT_POLICY=passive before torch is imported (it has no effect once torch has loaded
  OpenMP): idle intra-op threads sleep instead of spinning. On a CPU shared with other processes,
  spinning threads stall every parallel op by a scheduler tick; measured on a 2-core VM with one
  core busy elsewhere, an 8-token forward of SmolLM2-135M took 2-3 s with spinning threads and
  76 ms with passive ones, and an 8-request tiny-llama run 41 s against 5 s.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
