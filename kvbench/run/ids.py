"""Run ids (``YYYYmmdd-HHMMSS-<8 hex>``) and the ``${kvbench_id:...}`` resolver of conf/config.yaml.

Importing this module registers the resolver; ``kvbench.run.job.main`` pins the run and sweep ids.
"""
from __future__ import annotations

import time
import uuid

from omegaconf import OmegaConf


def new_run_id() -> str:
    """A run id that no other run gets: the time to the second and 32 random bits."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]


PINNED_IDS: dict[str, str] = {}  # the ids of the kvbench process's run and sweep dirs (main sets them)


def _id_resolver(key: str = "") -> str:
    return PINNED_IDS.get(key) or new_run_id()


# ``${kvbench_id:run}`` in conf/config.yaml: cached per config, so every read of hydra.run.dir
# gives the same id; Hydra copies the cache into each sweep job's config, hence one sweep dir.
# ``main`` pins the run and sweep ids so that the pre-check checks the very dirs Hydra creates.
OmegaConf.register_new_resolver("kvbench_id", _id_resolver, use_cache=True, replace=True)


def _looks_like_run_id(name: str) -> bool:
    parts = name.split("-")
    return len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() and len(parts[2]) == 8
