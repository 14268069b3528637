"""The pre-check: compose and check every job of the command line before Hydra writes anything
(one line and exit 2 on bad input); ``check_job`` is also each job's own check."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig

from kvbench.config.conflicts import check_conflicts
from kvbench.config.errors import ConfigError
from kvbench.config.compose import validate
from kvbench.config.seeds import resolve_seeds
from kvbench.config.spec import RunSpec, model_geometry
from kvbench.config.knob_types import check_knob_types, group_overrides, where_key_lives
from kvbench.config.source import hydra_source
from kvbench.config.sweeper_checks import check_launch, check_objective
from kvbench.config.validate import check_activation, check_dataset, check_servable
from kvbench.engine.policy_checks import check_priorities
from kvbench.results.resultsdir import check_results_dir
from kvbench.run import ids  # noqa: F401  (registers ${kvbench_id:...}, which the run dirs use)
from kvbench.run.group_knobs import hf_mixed_refusal
from kvbench.run.prepare import _allocator, _errors, _workload, run_spec
from kvbench.run.rundir import KEEP_ENV, check_output_dirs, keep_dir_for
from kvbench.sim.offload import check_tier_sizes


# -- command line ------------------------------------------------------------------------------
def _split_argv(argv: list[str]):
    """Hydra's parsed arguments (overrides, multirun, the config flags) and whether to skip the
    pre-check (help, --cfg, --info: nothing runs), or None for ``--version``. Hydra's own parser
    reads the flags, abbreviations (``--multir``) included; a flag it refuses raises ConfigError."""
    if any(a.startswith("--v") and "--version".startswith(a.split("=", 1)[0]) for a in argv):
        return None
    parser = get_args_parser()

    def refuse(message: str) -> None:
        raise ConfigError(f"command line: {message}")

    parser.error = refuse  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    args.skip = bool(args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                     or args.experimental_rerun)
    return args


_EXPANDABLE = (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP, ValueType.GLOB_CHOICE_SWEEP,
               ValueType.RANGE_SWEEP)


def _job_overrides(overrides: list[str], multirun: bool, params: list[str] | tuple[str, ...] = (),
                   config_loader=None) -> list[list[str]]:
    """The jobs of a command line as the basic sweeper builds them: ``params`` (its
    ``hydra.sweeper.params`` as ``key=value``, ``sweeper_params``) then the command line, the command
    line winning for a key in both. An interval (Optuna, Ax, Nevergrad) is left out: the sweeper
    picks those jobs, and each of them validates itself before it runs."""
    if not multirun:
        return [overrides]
    parsed = [o for o in OverridesParser.create(config_loader=config_loader).parse_overrides([*params, *overrides])
              if not o.is_sweep_override() or o.value_type in _EXPANDABLE]
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    return jobs or [[]]


def _sweeper_picks(lines: list[str]) -> bool:
    """Whether a sweep of these overrides has a sweep the basic sweeper cannot expand (an interval)."""
    return any(o.is_sweep_override() and o.value_type not in _EXPANDABLE
               for o in OverridesParser.create().parse_overrides(lines))


def sweeper_params(source, overrides: list[str]) -> tuple[list[str], bool]:
    """The basic sweeper's ``params`` as it reads them, ``key=value`` each, and whether the sweeper is
    the basic one. Hydra reads them from the multirun's own config, composed without the command
    line's sweeps: an ``experiment=a,b`` sweep gets the primary config's params, not a's or b's."""
    cfg = source.master(overrides)
    sweeper = cfg.hydra.sweeper
    if "BasicSweeper" not in str(sweeper.get("_target_", "")):
        return [], False  # another sweeper reads its params its own way (Optuna: choice(), interval())
    params = sweeper.get("params")
    return [f"{key}={value}" for key, value in (params or {}).items()], True


def _jobs_to_check(jobs: list[list[str]], groups: set[str]) -> list[list[str]]:
    """The jobs the pre-check composes: each distinct combination of config-group choices (allocator,
    model, workload, gpu, system, offload, ...) once, and enough more that every value of every plain
    key is checked at least once. Checking every job of a large sweep costs about 0.2 s a job (the
    96 jobs of experiment=paper-rate-opt13b-sharegpt: about 19 s on two busy cores, the workload of
    each built); this keeps the group combinations (what most checks depend on) whole and each
    swept value seen, in 13 of those 96 (about 3 s). A job whose failure needs two plain values
    together is caught by its own check (``check_job``) before it runs; a setting that every checked
    job ignores is confirmed on the others before it is refused (``_ignored_by_all``)."""
    seen_groups: set[tuple[str, ...]] = set()
    seen_values: set[str] = set()
    chosen = []
    for job in jobs:
        choice = tuple(group_overrides(job, groups))
        values = {o for o in job if o not in choice}
        if choice not in seen_groups or not values <= seen_values:
            chosen.append(job)
            seen_groups.add(choice)
            seen_values |= values
    return chosen


def _ignored_by_all(source, key: str, jobs: list[list[str]]) -> bool:
    """Whether each of ``jobs`` (those ``_jobs_to_check`` left out) ignores the setting ``key`` too:
    composed, no other check (the refusal's own path only)."""
    for job in jobs:
        cfg = source.compose([o for o in job if not o.lstrip("+~").startswith("hydra")])
        if key not in check_conflicts(cfg, job)[1]:
            return False
    return True


def check_job(cfg: DictConfig) -> RunSpec | None:
    """Every check of one composed job that needs no model weights: raises a kvbench error. Returns
    the run spec it built, for the job to hand on (None on hf without engine.kv_cache_bytes: the
    default pool needs the device's free memory, which ``prepare`` reads)."""
    resolve_seeds(cfg)
    validate(cfg)
    check_results_dir(Path(cfg.results_dir))
    if cfg.backend.name == "sim":
        spec = run_spec(cfg)
        _check_tiers(cfg, spec, _allocator(cfg, spec))
        _check_sim_family(cfg)
    else:
        spec = _check_hf(cfg)
    check_activation(cfg)
    workload = _workload(cfg)
    check_dataset(cfg, workload)
    check_servable(cfg, workload.requests)
    check_priorities(cfg, workload.requests)
    return spec


def check_composed(cfg: DictConfig, base: DictConfig, overrides: list[str] | None = None,
                   ignored: dict[str, list[str]] | None = None) -> None:
    """One job's checks: every knob keeps the kind of its default in ``base`` (the job's group
    choices alone, ``kvbench.config.knob_types``), then ``check_job``, then settings
    that contradict each other (``kvbench.config.conflicts``; ``overrides``: the job's command line). A
    setting the job ignores raises, or with ``ignored`` (a sweep) is noted there by key."""
    check_knob_types(cfg, base)
    check_objective(cfg, required=False)
    check_job(cfg)
    notes, refusals = check_conflicts(cfg, overrides or [])
    NOTES.update(dict.fromkeys(notes))
    if ignored is None and refusals:
        raise ConfigError(next(iter(refusals.values())))
    for key, line in refusals.items():  # a sweep: refused if every job ignores it (precheck)
        ignored.setdefault(key, []).append(line)


NOTES: dict[str, None] = {}  # one-line notes of the pre-check (which of two settings wins), in order


def _check_sim_family(cfg: DictConfig) -> None:
    """The cost model times a model family it knows, also when engine.kv_cache_bytes skips the
    weights' size (which would otherwise find a wrong family first)."""
    from kvbench.sim.cost_model import FAMILIES  # start-up time: the cost model's tables, sim only

    if cfg.model.get("family") not in FAMILIES:
        raise ConfigError(f"model.family must be one of {', '.join(FAMILIES)} on backend=sim; "
                          f"got {cfg.model.get('family')!r}")


def _check_hf(cfg: DictConfig) -> RunSpec | None:
    """The hf backend's device, attention path and explicit KV size, before any model is built; the
    run spec when engine.kv_cache_bytes sizes the pool (else None: see ``check_job``)."""
    from kvbench.executors.hf import resolve_device, virtual_clock  # start-up time: torch and transformers, hf only
    from kvbench.hf.model import FAMILIES  # start-up time: as above

    geometry = model_geometry(cfg.model)
    refusal = hf_mixed_refusal(cfg, geometry)  # a mixed family's own reason before the family list
    if refusal is not None:
        raise ConfigError(refusal)
    if cfg.model.family not in FAMILIES:
        raise ConfigError(f"model.family must be one of {', '.join(FAMILIES)} on backend=hf; got {cfg.model.family!r}")
    virtual_clock(cfg.model, cfg.engine, cfg.gpu, cfg.get("system"), geometry=geometry)  # engine.clock=virtual
    device = resolve_device(cfg.engine.device)
    if cfg.engine.attention == "triton" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError("engine.attention=triton needs a CUDA device (or TRITON_INTERPRET=1 on the CPU); "
                          "use auto or torch")
    kv = cfg.engine.kv_cache_bytes
    if kv is not None and device == "cpu":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if kv > ram:
            raise ConfigError(f"engine.kv_cache_bytes: {kv:.4g} bytes is more than this machine's memory "
                              f"({ram / 2**30:.1f} GiB)")
    if kv is None:
        return None
    spec = run_spec(cfg, geometry=geometry)  # an explicit size: the job's own spec
    _check_tiers(cfg, spec, _allocator(cfg, spec))
    return spec


def _check_tiers(cfg: DictConfig, spec: RunSpec, allocator) -> None:
    """The offload tiers hold at least one chunk each, on this job's pool (``prepare`` builds them)."""
    check_tier_sizes(cfg, spec.geometry.bytes_per_slot, spec.kv_bytes, allocator.block_size)


def _app_task() -> None:
    """Stands for ``kvbench.app.hydra_task`` when the caller names no task function (tests)."""


_app_task.__module__ = "kvbench.app"  # Hydra resolves a relative --config-path against the app's module


def precheck(argv: list[str], task_function: Callable | None = None) -> str | None:
    """Compose and validate every job of the command line; the one-line error, or None.
    ``task_function``: the ``@hydra.main`` function the command line will run (``kvbench.app``'s)."""
    NOTES.clear()
    SEARCH_DIRS.clear()
    try:
        args = _split_argv(argv)
        if args is None or args.skip:
            return None
        overrides, multirun = list(args.overrides), bool(args.multirun)
        ignored: dict[str, list[str]] = {}  # a setting -> the line of each job that ignores it
        with hydra_source(args, overrides, task_function or _app_task) as source:
            SEARCH_DIRS[:] = source.extra_dirs
            params, basic = sweeper_params(source, overrides) if multirun else ([], True)
            jobs = _job_overrides(overrides, multirun, params, GlobalHydra.instance().config_loader())
            # None: the sweeper picks the jobs (Optuna, an interval)
            PLANNED["jobs"] = len(jobs) if basic and not _sweeper_picks([*params, *overrides]) else None
            checked = _jobs_to_check(jobs, source.group_names())
            bases: dict[tuple[str, ...], DictConfig] = {}
            for num, job in enumerate(checked):
                plain = [o for o in job if not o.lstrip("+~").startswith("hydra")]
                cfg = source.compose(plain)
                groups = tuple(group_overrides(plain, source.group_names()))
                if groups not in bases:
                    bases[groups] = source.compose(list(groups))
                check_composed(cfg, bases[groups], job, ignored)
                if num == 0:
                    check_launch(source.compose, overrides, job, multirun)
            checked_ids = {id(job) for job in checked}
            unchecked = [job for job in jobs if id(job) not in checked_ids]
            for key, lines in ignored.items():  # refused if every job ignores it
                if len(lines) == len(checked) and _ignored_by_all(source, key, unchecked):
                    raise ConfigError(lines[0])
            _plan_output_dirs(source, jobs, multirun)
    except _errors() as exc:
        return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    except (HydraException, ValueError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("To append")]
        cause = exc.__cause__
        msg = lines[0].rstrip(".") if lines else type(exc).__name__
        if len(lines) > 1 and lines[1].startswith("Available options"):
            options = [ln for ln in lines[2:] if not ln.startswith(("Config search path", "provider="))]
            msg += f"; {lines[1].rstrip(':').lower()}: {', '.join(options)}"
        if cause is not None and str(cause).splitlines():
            msg += ": " + str(cause).splitlines()[0]
        return msg + _struct_hint(msg) + _extra_hint(msg)
    except Exception as exc:  # a check that broke on a value no class foresaw: still one line
        text = str(exc).strip().splitlines()
        return f"the config could not be checked ({type(exc).__name__}: {text[0] if text else 'no detail'})"
    return None


def _struct_hint(message: str) -> str:
    """Where a key a struct group lacks does exist (Hydra's "Could not override 'engine.x'")."""
    match = re.match(r"Could not (?:override|append to config)\W+'?([\w.]+)'?", message)
    if match is None or "not in struct" not in message or match.group(1).startswith("hydra"):
        return ""
    return where_key_lives(match.group(1), SEARCH_DIRS)


# Hydra plugins that are extras of their own: the config group option -> how to install it
EXTRAS = {"hydra/launcher/ray": "the Ray launcher is the ray extra: make ray-env (or pip install -e '.[ray]')",
          "hydra/sweeper/optuna": "the Optuna sweeper is in the dev extra: pip install hydra-optuna-sweeper",
          "hydra/launcher/joblib": "the joblib launcher: pip install hydra-joblib-launcher",
          "hydra/launcher/submitit_local": "the submitit launchers: pip install hydra-submitit-launcher",
          "hydra/launcher/submitit_slurm": "the submitit launchers: pip install hydra-submitit-launcher"}


def _extra_hint(message: str) -> str:
    """How to install a launcher or sweeper plugin that Hydra could not find."""
    return next((f"; {hint}" for option, hint in EXTRAS.items() if f"Could not find '{option}'" in message), "")


SEARCH_DIRS: list[Path] = []  # the user's config folders of the current pre-check (config.source)


_OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def _plan_output_dirs(source, jobs: list[list[str]], multirun: bool) -> None:
    """Check every job's run (or sweep) dir before Hydra writes anything; note the folder that
    cleanup must never remove (``KVBENCH_KEEP_DIR``, the deepest one that exists now)."""
    seen: dict[tuple[str, ...], Path] = {}
    for job in jobs:
        path_keys = tuple(o for o in job if o.lstrip("+~").split("=", 1)[0] in
                          (*_OUTPUT_KEYS, "results_dir", "experiment_name", "experiment"))
        if path_keys not in seen:
            cfg = source.compose([o for o in job if not o.startswith("hydra") or o.split("=", 1)[0] in _OUTPUT_KEYS],
                                 return_hydra_config=True)
            seen[path_keys] = check_output_dirs(cfg, multirun)
    PLANNED.update(dirs=list(seen.values()), multirun=multirun)
    os.environ[KEEP_ENV] = str(keep_dir_for(PLANNED["dirs"][0]))


PLANNED: dict = {}  # the run dirs (single run) or sweep dirs that the pre-check checked, and the mode
