"""Load GPU profiles and model configs from ``conf/`` outside Hydra (tests, scripts, notebooks).

Hydra runs load the same files as the ``gpu`` and ``model`` config groups.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def available(group: str) -> list[str]:
    """Names of the configs of a group (``gpu`` or ``model``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load(group: str, name: str, **overrides) -> DictConfig:
    """``conf/<group>/<name>.yaml`` with keyword overrides, e.g. ``load("gpu", "a100-80gb", count=4)``."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"{group} must be one of {available(group)}, got {name!r}")
    cfg = OmegaConf.load(path)
    for key, value in overrides.items():
        if key not in cfg:
            raise ValueError(f"{group}.{key} is not a field of {name} (fields: {list(cfg)})")
        cfg[key] = value
    return cfg


def load_gpu(name: str, **overrides) -> DictConfig:
    return load("gpu", name, **overrides)


def load_model(name: str, **overrides) -> DictConfig:
    return load("model", name, **overrides)
