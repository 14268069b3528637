"""One naming scheme for runs everywhere (tables, W&B names, tags and groups, figures' inputs).

The allocator label is the allocator's config name (``conf/allocator/<label>.yaml``):
``orca-max``, ``orca-pow2``, ``orca-oracle``, ``paged``, ``contiguous-oracle``. A run whose
allocator knobs no longer match the config it started from (``allocator=orca-max
allocator.reserve=pow2``) is named by its knobs instead, so a label never lies. Missing values
print as ``-``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR

NOT_APPLICABLE = "-"
_ORCA_RESERVES = ("max", "pow2", "oracle")


# knobs a label names: a run whose value differs from its config's is not that config's run
LABELLED_KNOBS = ("page_bytes",)
DEFAULT_PAGE_BYTES = 2 * 2**20  # vAttention's page as the CUDA driver maps it (conf/allocator/vattention.yaml)


@lru_cache(maxsize=64)
def _config_knobs(choice: str) -> tuple[str | None, str | None, tuple] | None:
    path = CONF_DIR / "allocator" / f"{choice}.yaml"
    if not path.is_file():
        return None
    cfg = OmegaConf.load(path)
    return cfg.get("name"), cfg.get("reserve"), tuple(cfg.get(k) for k in LABELLED_KNOBS)


def _knobs_hold(choice: str, name: str, reserve: str | None, knobs: Mapping[str, object] | None) -> bool:
    config = _config_knobs(choice)
    if config is None or config[:2] != (name, reserve):
        return False
    for key, configured in zip(LABELLED_KNOBS, config[2]):
        used = (knobs or {}).get(key)
        if configured is not None and not missing(used) and float(used) != float(configured):
            return False
    return True


def allocator_label(name: str, reserve: str | None = None, choice: str | None = None,
                    knobs: Mapping[str, object] | None = None) -> str:
    """The config name of this allocator (``choice`` when its knobs still hold: reserve, and the
    page size in ``knobs``), else one derived from the knobs the same way: buddy with
    max/pow2/oracle is ``orca-<reserve>``; a config chosen for vAttention whose page size was
    overridden is named by the page used (``vattention-64k``, or ``vattention`` for 2 MiB). Without
    a choice (``run(cfg)`` outside Hydra) the label stays the allocator's name, as before."""
    reserve = None if missing(reserve) else str(reserve)
    if choice and _knobs_hold(choice, name, reserve, knobs):
        return choice
    if name == "buddy" and reserve in _ORCA_RESERVES:
        return f"orca-{reserve}"
    page = (knobs or {}).get("page_bytes")
    if choice and name == "vattention" and not missing(page) and float(page) != DEFAULT_PAGE_BYTES:
        page = float(page)
        return f"vattention-{page / 1024:g}k" if page < 2**20 else f"vattention-{page / 2**20:g}m"
    return f"{name}-{reserve}" if reserve else str(name)


def hydra_choice(group: str = "allocator") -> str | None:
    """The config chosen for a group in the running Hydra app, or None outside one."""
    try:
        from hydra.core.hydra_config import HydraConfig  # start-up time: Hydra, only inside a job

        return HydraConfig.get().runtime.choices.get(group)
    except (ImportError, ValueError):
        return None


def missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value) in ("", "None", "nan", "<NA>")


def number(value: float) -> str:
    """4 significant digits, never in exponent form from 1e-4 up (31670.0 -> ``31670``, not 3.167e+04)."""
    text = f"{value:.4g}"
    if "e" in text and math.isfinite(value) and abs(value) >= 1e-4:
        return f"{value:.0f}" if abs(value) >= 1 else f"{value:.6f}".rstrip("0")
    return text


def cell(value: object) -> str:
    """A table cell: ``-`` for not applicable, 4 significant digits for floats."""
    if missing(value):
        return NOT_APPLICABLE
    return number(value) if isinstance(value, float) else str(value)


def _size(num_bytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g}{unit}"
    return f"{num_bytes:g}B"


def granularity(fields: Mapping[str, object]) -> str:
    """The unit an allocator hands out, in its own terms: ``16-tok blocks`` (paged family),
    ``2MiB pages=204 tok`` (vAttention: page size and tokens per page; its block_size is only
    the block table's unit inside a page), ``region/max`` (contiguous), ``buddy/max``."""
    name = str(fields.get("allocator") or "")
    block, reserve = fields.get("block_size"), fields.get("reserve")
    if name == "vattention":
        page, tokens = fields.get("page_bytes"), fields.get("tokens_per_page")
        page_text = _size(float(page)) if not missing(page) else "?"
        return f"{page_text} pages={int(tokens)} tok" if not missing(tokens) else f"{page_text} pages"
    if name in ("contiguous", "buddy"):
        kind = "region" if name == "contiguous" else "buddy"
        return f"{kind}/{reserve}" if not missing(reserve) else kind
    if not missing(block):
        return f"{int(block)}-tok blocks"
    return name or NOT_APPLICABLE


def run_name(fields: Mapping[str, object]) -> str:
    """``orca-max-bs16-sharegpt-r2`` from label, block size, workload and request rate."""
    parts = [str(fields.get("allocator_label") or fields.get("allocator") or "run")]
    if not missing(fields.get("block_size")):
        parts.append(f"bs{fields['block_size']}")
    if not missing(fields.get("workload")):
        parts.append(str(fields["workload"]))
    rate = fields.get("request_rate")
    if not missing(rate):
        parts.append(f"r{float(rate):g}")
    return "-".join(parts)


def run_tags(fields: Mapping[str, object]) -> list[str]:
    """``key=value`` tags for allocator (the label), reserve, block size, workload, rate, experiment."""
    keys = (("allocator", "allocator_label"), ("reserve", "reserve"), ("block_size", "block_size"),
            ("workload", "workload"), ("request_rate", "request_rate"), ("experiment", "experiment"))
    tags = []
    for tag, key in keys:
        value = fields.get(key)
        if not missing(value):
            tags.append(f"{tag}={value:g}" if isinstance(value, float) else f"{tag}={value}")
    return tags


def fields_from_config(flat: Mapping[str, object]) -> dict[str, object]:
    """The naming fields of a flattened run config (``allocator.name``, ``workload.name``, ...)."""
    name = flat.get("allocator.name")
    return {
        "allocator": name,
        "allocator_label": allocator_label(str(name), flat.get("allocator.reserve"), hydra_choice(),
                                           {"page_bytes": flat.get("allocator.page_bytes")})
        if name is not None else None,
        "reserve": flat.get("allocator.reserve"),
        "block_size": flat.get("allocator.block_size"),
        "workload": flat.get("workload.name"),
        "request_rate": flat.get("workload.request_rate"),
        "experiment": flat.get("experiment_name"),
    }
