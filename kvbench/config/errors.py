"""What every config check shares: the conf/ folder and ``ConfigError`` (one line, exit 2)."""
from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


class ConfigError(ValueError):
    """A wrong config value; the message is one line naming the key and what is allowed."""
