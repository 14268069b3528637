"""Experiment loggers, chosen by the ``logger`` config group (``none`` or ``wandb``).

``build_logger`` imports a tracking library only for the logger it builds: ``logger=none``
never imports wandb.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    RATE_PREFIX,
    STEP_METRIC,
    STEP_PREFIX,
    Logger,
    NullLogger,
    flatten_config,
    run_tags,
    tags_from_config,
)

LOGGER_NAMES = ("none", "wandb")

__all__ = [
    "LOGGER_NAMES",
    "RATE_PREFIX",
    "STEP_METRIC",
    "STEP_PREFIX",
    "Logger",
    "NullLogger",
    "build_logger",
    "flatten_config",
    "run_tags",
    "tags_from_config",
]


def build_logger(cfg: Mapping[str, Any] | None) -> Logger:
    """Build the logger named by ``cfg.name`` (the ``logger`` group config; None means none).

    Raises ValueError with a one-line message for an unknown name.
    """
    name = "none" if cfg is None else cfg.get("name", "none")
    if name in (None, "none"):
        return NullLogger()
    if name == "wandb":
        from .wandb_logger import WandbLogger  # imports wandb lazily, at start()

        return WandbLogger.from_config(cfg)
    raise ValueError(f"logger.name={name!r} is not allowed; use one of: {', '.join(LOGGER_NAMES)}")
