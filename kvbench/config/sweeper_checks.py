"""Checks of the launcher and sweeper settings of a command line, before Hydra starts any job.

``check_launch`` composes the Hydra node of the first job (``return_hydra_config``) and refuses
what would otherwise fail inside Hydra, a launcher or Optuna with a traceback: joblib's
``n_jobs=0``, an Optuna study of no trials or of an unknown direction, a search interval that is
empty or reversed or leaves its knob's allowed range, a sweep of intervals under a sweeper that
cannot sample them, and an objective (``optimized_metric``) the run does not report.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep
from omegaconf import DictConfig, OmegaConf

from kvbench.config.errors import ConfigError
from kvbench.config.knob_types import check_node_kinds, group_overrides
from kvbench.config.launcher_checks import check_launcher, cluster_overrides
from kvbench.config.validate import RULES

DIRECTIONS = ("minimize", "maximize")
ADDED_OVERRIDES: list[str] = []  # what the command line needs for the launcher to run (cluster_overrides)


def _is_optuna(hydra_cfg: DictConfig) -> bool:
    return "optuna" in str(hydra_cfg.sweeper.get("_target_", "")).lower()


def check_launch(compose: Callable[..., DictConfig], overrides: list[str], first_job: list[str], multirun: bool) -> None:
    """Raise ConfigError for a launcher or sweeper setting that cannot run."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    hydra_overrides = [o.input_line for o in parsed if o.key_or_group.startswith("hydra")]
    plain = [o for o in first_job if not o.lstrip("+~").startswith("hydra")]
    cfg = compose(plain + hydra_overrides, return_hydra_config=True)
    choices = group_overrides(plain) + [o for o in hydra_overrides if o.lstrip("+").startswith("hydra/")]
    _check_plugin_kinds(compose, cfg, choices)
    _check_launcher(cfg.hydra.launcher, multirun)
    ADDED_OVERRIDES[:] = cluster_overrides(cfg.hydra.launcher) if multirun else []
    optuna = _is_optuna(cfg.hydra)
    intervals = [o for o in parsed if not o.key_or_group.startswith("hydra") and _is_interval(o)]
    if multirun and intervals and not optuna:
        raise ConfigError(f"{intervals[0].input_line}: an interval needs a sampling sweeper "
                          "(hydra/sweeper=optuna); the basic sweeper takes a list a,b,c or range()")
    if optuna and multirun:
        _check_optuna(cfg, parsed)
    check_objective(cfg, optuna and multirun)


def _check_plugin_kinds(compose: Callable, cfg: DictConfig, plugin_choices: list[str]) -> None:
    """The launcher's and sweeper's settings keep the kinds of their defaults; no unknown keys."""
    base = compose(plugin_choices, return_hydra_config=True)
    for node in ("launcher", "sweeper"):
        prefix = f"hydra.{node}."
        open_dicts = tuple(prefix + key for key in _open_dicts(base.hydra[node]))
        check_node_kinds(cfg.hydra[node], base.hydra[node], prefix, (f"hydra.{node}.params", *open_dicts))


def _open_dicts(node: DictConfig, prefix: str = "") -> list[str]:
    """The fields of a plugin's structured config that are open dicts (``Dict[str, Any]``, such as
    the Ray launcher's ``ray.init``): their keys are the plugin's to check (``launcher_checks``)."""
    found = []
    for key in node:
        child = node._get_node(key)
        if not isinstance(child, DictConfig) or child._is_none() or child._is_interpolation():
            continue
        if child._metadata.object_type in (dict, None):
            found.append(f"{prefix}{key}")
        else:
            found += _open_dicts(child, f"{prefix}{key}.")
    return found


def _check_launcher(launcher: DictConfig, multirun: bool) -> None:
    check_launcher(launcher, multirun)


def _is_interval(override) -> bool:
    return isinstance(override.value(), IntervalSweep)


def _check_optuna(cfg: DictConfig, parsed: list) -> None:
    sweeper = cfg.hydra.sweeper
    for key in ("n_trials", "n_jobs"):
        value = sweeper.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"hydra.sweeper.{key} must be an integer >= 1; got {value!r}")
    direction = sweeper.get("direction")
    directions = list(direction) if OmegaConf.is_list(direction) else [direction]
    for item in directions:
        if str(getattr(item, "name", item)) not in DIRECTIONS:
            raise ConfigError(f"hydra.sweeper.direction must be minimize or maximize; got {item!r}")
    params = [OverridesParser.create().parse_override(f"{key}={value}")
              for key, value in (sweeper.get("params") or {}).items()]
    for override in params + [o for o in parsed if not o.key_or_group.startswith("hydra")]:
        if _is_interval(override):
            _check_interval(cfg, override)


def _check_interval(cfg: DictConfig, override) -> None:
    """An interval is a range of a numeric knob: start < end, both inside the knob's allowed range."""
    interval = override.value()
    key = override.key_or_group
    start, end = interval.start, interval.end
    if not (math.isfinite(start) and math.isfinite(end)) or not start < end:
        raise ConfigError(f"{override.input_line}: an interval needs finite bounds with start < end; "
                          f"got {start:g} to {end:g}")
    rule = next((r for r in RULES if r.key == key), None)
    if OmegaConf.select(cfg, key, default=None) is None and rule is None:
        raise ConfigError(f"{override.input_line}: {key} is not a numeric knob of this run")
    if rule is not None:
        for bound in (start, end):
            try:
                rule.check(int(bound) if rule.kind == "int" and float(bound).is_integer() else bound)
            except ConfigError as exc:
                raise ConfigError(f"{override.input_line}: {exc}") from None


# summary columns a run reports as numbers besides the serving metrics (kvbench.metrics)
NUMERIC_SUMMARY = (
    "duration_s", "request_throughput", "output_token_throughput", "total_token_throughput",
    "mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_tpot_s", "mean_e2e_s", "normalized_latency_s",
    "mean_batch_size", "max_batch_size", "mean_running_requests", "mem_token_frac", "mem_reserved_frac",
    "mem_internal_frac", "mem_external_frac", "mem_cached_frac", "num_preemptions", "prefix_hit_rate",
    "sharing_saving_frac", "num_finished", "num_rejected",
)  # fmt: skip


def objective_columns(cfg: DictConfig) -> list[str]:
    """The numeric summary columns this run reports, goodput only with a goodput SLO."""
    import pandas as pd  # start-up time: pandas, an objective check only

    from kvbench.metrics import parse_goodput, parse_percentiles, serving_metrics  # start-up time: as above

    metrics = cfg.get("metrics") or {}
    goodput = parse_goodput(metrics.get("goodput"))
    serving = serving_metrics(pd.DataFrame({"status": []}), 1.0,
                              percentiles=parse_percentiles(metrics.get("percentiles")), goodput=goodput)
    names = [*NUMERIC_SUMMARY, *serving]
    return [n for n in dict.fromkeys(names) if goodput or "goodput" not in n]


def check_objective(cfg: DictConfig, required: bool) -> None:
    """``optimized_metric`` names a number every run reports (the value a sweeper optimizes)."""
    metric = cfg.get("optimized_metric")
    if metric is None and not required:
        return
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"optimized_metric must name a summary column, e.g. request_throughput; got {metric!r}")
    columns = objective_columns(cfg)
    if metric in columns:
        return
    if "goodput" in metric:
        raise ConfigError(f"optimized_metric={metric} needs a goodput SLO: set metrics.goodput, "
                          "e.g. metrics.goodput='ttft:500 tpot:50'")
    raise ConfigError(f"optimized_metric must be a numeric summary column such as request_throughput, "
                      f"mean_ttft_ms or mem_external_frac; got {metric!r}")
