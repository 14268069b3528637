"""Every knob keeps the kind of its default: the class checks behind the knob table.

``check_knob_types(cfg, base)`` compares a composed run config with ``base``, the same command
line composed with its group choices only (``model=...``, ``+baseline=...``, ``experiment=...``),
and raises ``ConfigError`` for the first knob whose new value is of another kind:

- a boolean default takes only true or false (``maybe`` is refused);
- a string default takes only a non-empty string (``''`` is refused);
- a number takes only a finite number (inf only where the default is inf), an integer default
  only a whole number, no negative number where the default is >= 0, and nothing beyond
  ``ABSURD`` in size;
- a list default takes only a list (``abc`` would become the tags a, b, c).

A key the defaults do not have (``+foo=1``) is refused unless it is an optional knob some code
reads: a field of another model file or GPU profile, or one of ``OPTIONAL`` below.
"""
from __future__ import annotations

import math
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.validate import RULES

ABSURD = 1e18  # no knob of a run means anything this large (bytes of a PiB are 1.1e15)

# keys read when present, beyond those of the config files: key -> example value of their kind
# (None: any kind; the code that reads it checks it)
OPTIONAL: dict[str, object] = {
    "model.eos_token_id": None,  # an id or a list of ids: the hf executor checks it
    "model.tie_word_embeddings": True,
    "model.rope_theta": 10000.0,
    "model.rms_norm_eps": 1e-6,
    "model.layer_norm_eps": 1e-5,
    "model.init_std": 0.02,
    "baseline": "orca-max",
    "workload.priority_shares": [0.5, 0.5],  # +workload.priority_shares=[0.2,0.8]: kvbench.workloads.priorities
}
OPEN_GROUPS = ("model", "gpu")  # a field of one option is a knob of them all (read with .get)
SKIP_ROOTS = ("hydra",)


def _group_fields(group: str) -> dict[str, object]:
    """The fields of every option of a config group, each with one example value."""
    fields: dict[str, object] = {}
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        node = OmegaConf.load(path)
        for key, value in node.items():
            if value is not None:
                fields.setdefault(f"{group}.{key}", value)
    return fields


def _gpu_constants() -> dict[str, object]:
    from kvbench.sim.cost_model import DEFAULTS  # start-up time: the cost model, sim knobs only

    return {f"gpu.{key}": value for key, value in DEFAULTS.items()}


def known_optional() -> dict[str, object]:
    """Keys a run reads when present though its defaults may not hold them."""
    known = dict(OPTIONAL)
    for group in OPEN_GROUPS:
        known.update(_group_fields(group))
    known.update(_gpu_constants())
    return known


def _leaves(node, prefix: str = "", skip: tuple[str, ...] = SKIP_ROOTS):
    """(dotted key, node) for every leaf of a config outside ``skip``, interpolations unresolved."""
    for key in node if isinstance(node, DictConfig) else []:
        path = f"{prefix}{key}"
        if path in skip:
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_interpolation() and not child._is_none():
            yield from _leaves(child, path + ".", skip)
        else:
            yield path, child


def _value(node):
    if node._is_interpolation() or node._is_missing():
        return _UNSET
    if isinstance(node, (DictConfig, ListConfig)):  # a list's _value() is its item nodes
        return OmegaConf.to_container(node)
    value = node._value()
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


_UNSET = object()


def kind_error(key: str, default, value) -> str | None:
    """Why ``value`` cannot replace ``default`` for ``key``; None when it can."""
    if value is None or value == default and type(value) is type(default):
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"{key} must be true or false; got {value!r}"
    if isinstance(default, (int, float)):
        return _number_error(key, default, value)
    if isinstance(default, str):
        if not isinstance(value, str) or not value.strip():
            return f"{key} must be a non-empty string; got {value!r}"
        return None
    if isinstance(default, list):
        if not isinstance(value, list):
            return f"{key} must be a list, e.g. {key}=[{value}]; got {value!r}"
        if default:
            example = float(default[0]) if type(default[0]) is int else default[0]  # 99.9 is a percentile
            for item in value:
                error = kind_error(f"{key} item", example, item)
                if error:
                    return error
        return None
    return None


def _lower_bound(key: str) -> str:
    """The knob's lower bound as its rule (``kvbench.config.validate``) states it (``> 0``, ``>= 1``),
    else ``>= 0``."""
    for rule in RULES:
        if rule.key == key:
            if rule.above is not None and rule.above >= 0:
                return f"> {rule.above:g}"
            if rule.low is not None and rule.low > 0:
                return f">= {rule.low:g}"
    return ">= 0"


def _number_error(key: str, default, value) -> str | None:
    what = "an integer" if isinstance(default, int) and not isinstance(default, bool) else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key} must be {what}; got {value!r}"
    if math.isnan(value):
        return f"{key} must be {what}, not nan"
    if math.isinf(value):
        if isinstance(default, float) and math.isinf(default) and value > 0:
            return None
        return f"{key} must be a finite number; got {value!r}"
    if what == "an integer" and not float(value).is_integer():
        return f"{key} must be an integer; got {value!r}"
    if value < 0 <= default:
        return f"{key} must be {_lower_bound(key)}; got {value!r}"
    if abs(value) > ABSURD:
        return f"{key} must be at most {ABSURD:g} in size; got {value!r}"
    return None


def check_knob_types(cfg: DictConfig, base: DictConfig) -> None:
    """Raise ConfigError for the first knob of ``cfg`` that is unknown or of the wrong kind."""
    check_node_kinds(cfg, base, "", SKIP_ROOTS, optional=True)


def check_node_kinds(cfg: DictConfig, base: DictConfig, prefix: str, skip: tuple[str, ...],
                     optional: bool = False) -> None:
    """``check_knob_types`` for one node (``prefix`` names it: ``hydra.launcher.``); ``optional``:
    the keys of ``known_optional()`` are known too."""
    defaults = {key: _value(node) for key, node in _leaves(base, prefix, skip)}
    known = None if optional else {}
    for key, node in _leaves(cfg, prefix, skip):
        value = _value(node)
        if value is _UNSET:
            continue
        if key in defaults:
            default = defaults[key]
        else:
            known = known_optional() if known is None else known
            if key not in known:
                raise ConfigError(f"{key}: unknown key; kvbench reads no such knob (check the spelling "
                                  f"in {_conf_hint(key)}){where_key_lives(key)}")
            default = known[key]
        if default is _UNSET or default is None:
            continue
        error = kind_error(key, default, value)
        if error:
            raise ConfigError(error)


def where_key_lives(key: str, extra_dirs: list[Path] | None = None) -> str:
    """Where a key that its group lacks does exist (``engine.max_concurrency`` -> ``workload``):
    ``; it lives in workload (workload.max_concurrency=...)``, or '' when no config has it. Looks
    through the top-level knobs and every option of every group of the search path."""
    parts = key.lstrip("+~").split(".")
    group, rest = parts[0], ".".join(parts[1:])
    if not rest:
        return ""
    leaf = parts[-1]
    found: dict[str, list[str]] = {}  # the key where it exists -> the group options that hold it
    top = OmegaConf.load(CONF_DIR / "config.yaml")
    if leaf in top and leaf != "hydra" and leaf != group:
        found.setdefault(leaf, [])
    for folder in [CONF_DIR, *(extra_dirs or [])]:
        for path in sorted(Path(folder).glob("*/*.yaml")):
            other = path.parent.name
            if other in ("experiment", "hydra"):
                continue
            try:
                node = OmegaConf.load(path)
            except Exception:  # a broken user file is Hydra's to report when it is chosen
                continue
            if isinstance(node, DictConfig) and OmegaConf.select(node, rest, default=_UNSET) is not _UNSET:
                found.setdefault(f"{other}.{rest}", []).append(f"{other}={path.stem}")
            elif isinstance(node, DictConfig) and leaf in node and rest != leaf:
                found.setdefault(f"{other}.{leaf}", []).append(f"{other}={path.stem}")
    if not found:
        return ""
    default_cfg = OmegaConf.load(CONF_DIR / "config.yaml").get("defaults") or []
    defaults = {k: v for item in default_cfg if isinstance(item, DictConfig) for k, v in item.items()}
    hints = []
    for where, options in found.items():
        grp = where.split(".", 1)[0]
        in_default = not options or (grp != group and f"{grp}={defaults.get(grp)}" in options)
        hints.append(where if in_default else f"{where} (with {', '.join(options[:3])}"
                     f"{', ...' if len(options) > 3 else ''})")
    return f"; it lives in {' and '.join(hints[:3])}"


def _conf_hint(key: str) -> str:
    group = key.split(".", 1)[0]
    if group == "hydra":
        return "the plugin's settings: kvbench --info config"
    return f"conf/{group}/" if (CONF_DIR / group).is_dir() else "conf/config.yaml"


def group_names() -> set[str]:
    """The config groups a command line may choose (``model=...``, ``+baseline=...``)."""
    return {p.name for p in Path(CONF_DIR).iterdir() if p.is_dir()}


def group_overrides(overrides: list[str], groups: set[str] | None = None) -> list[str]:
    """The overrides that choose a config group option: the defaults a run's knobs are checked on
    (``groups``: the group names of the search path, the package's ``conf/`` by default)."""
    groups = group_names() if groups is None else groups
    chosen = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~").split("@", 1)[0]
        if key in groups:
            chosen.append(override)
    return chosen
