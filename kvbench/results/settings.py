"""Every setting a run ran with, in its record: each leaf of the resolved config as one column.

A run's summary (``summary.json``, its index row, the W&B config) holds, beside the derived
columns, one ``cfg.<dotted key>`` column per leaf of its resolved Hydra config
(``cfg.allocator.ratios``, ``cfg.engine.max_num_seqs``, ``cfg.seed``), and ``cfg_keys``: the count
and a digest of the recorded key names. A leaf is a scalar (null, bool, int, float, str) as it
is; a list, or a mapping with no keys, is its JSON text (keys sorted, no spaces), so that equal
values compare and hash equal. Nothing is listed by hand: a knob added to ``conf/`` is recorded,
and grouped on (``kvbench.results.grouping``), with no change here.

Left out (NOT_SETTINGS), because they say where a run's output goes or how it is shown, never
what the run does: ``hydra.*`` (the launcher's directories and callbacks), ``results_dir``,
``progress`` (a console bar), ``logger.*`` (where a copy of the results is sent),
``optimized_metric`` (which column a sweeper reads back) and ``metrics.report`` (a console
printout). Input paths (``model.path``, ``workload.path``) are recorded: another file may hold
other data. Seeds (``cfg.seed`` and every ``cfg.*.seed``) are recorded but are the repeat axis,
not settings (``is_seed``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

PREFIX = "cfg."
KEYS_COLUMN = "cfg_keys"
NOT_SETTINGS: tuple[str, ...] = ("hydra", "results_dir", "progress", "logger", "optimized_metric", "metrics.report")
SEED_LEAF = "seed"


def excluded(key: str) -> bool:
    """Whether a dotted config key is left out of the record (NOT_SETTINGS or under one)."""
    return any(key == name or key.startswith(name + ".") for name in NOT_SETTINGS)


def leaf_value(value: Any) -> Any:
    """A leaf as recorded: scalars as they are, a list or mapping as its sorted, compact JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping) or (isinstance(value, Sequence) and not isinstance(value, bytes)):
        return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), default=str)
    return str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


def config_leaves(config: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded leaves of a resolved config (plain mappings; OmegaConf: ``to_container(resolve=True)``)
    as ``{dotted key: leaf_value}``, NOT_SETTINGS left out; a mapping with keys is walked into."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if excluded(path):
                continue
            if isinstance(value, Mapping) and value:
                walk(path + ".", value)
            else:
                out[path] = leaf_value(value)

    walk("", config)
    return out


def keys_digest(keys: Sequence[str]) -> str:
    """``<count>:<12 hex>`` naming a set of recorded keys: rows that record other keys differ in it."""
    names = sorted(keys)
    return f"{len(names)}:{hashlib.sha256(chr(10).join(names).encode()).hexdigest()[:12]}"


def record(config: Mapping[str, Any]) -> dict[str, Any]:
    """The summary columns that record a resolved config: ``cfg.<key>`` per leaf, and ``cfg_keys``."""
    leaves = config_leaves(config)
    return {PREFIX + key: value for key, value in leaves.items()} | {KEYS_COLUMN: keys_digest(list(leaves))}


def is_recorded(column: str) -> bool:
    """Whether a summary column is a recorded config leaf."""
    return column.startswith(PREFIX)


def is_seed(column: str) -> bool:
    """Whether a recorded leaf is a seed (``cfg.seed``, ``cfg.workload.seed``): the repeat axis."""
    return is_recorded(column) and column.rsplit(".", 1)[-1] == SEED_LEAF
