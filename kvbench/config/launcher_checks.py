"""The launcher's own settings, checked as the launcher will read them, before any job starts.

A launcher plugin's node (``hydra.launcher``) is a structured config of its own: its fixed fields
keep the kinds of their defaults (``knob_types.check_node_kinds``), and a field that is an open
dict (the Ray launcher's ``ray.init`` and ``ray.remote``, passed on as ``ray.init(**init)`` and
``ray.remote(**remote)``) takes the arguments of the function it feeds, so
``+hydra.launcher.ray.init.num_cpus=2`` and ``+hydra.launcher.ray.init.address=auto`` are the
plugin's to accept. Values the launcher would take and then fail on, after Hydra has written the
sweep's folders, are refused here: joblib's ``backend``, ``prefer``, ``require`` and ``mmap_mode``,
submitit's sizes (``cpus_per_task=0``), a SLURM launcher on a machine without SLURM, and Ray
arguments of the wrong kind or that ``ray.init`` / ``ray.remote`` do not take.
"""
from __future__ import annotations

import inspect
import shutil

from omegaconf import DictConfig, OmegaConf

from kvbench.config.errors import ConfigError

JOBLIB_CHOICES: dict[str, tuple] = {
    "backend": (None, "loky", "threading", "multiprocessing", "sequential"),
    "prefer": (None, "processes", "threads"),
    "require": (None, "sharedmem"),
    "mmap_mode": (None, "r+", "r", "w+", "c"),
}
# submitit sizes: key -> smallest value (a count of 0 CPUs or nodes cannot run a job)
SUBMITIT_MINIMUM: dict[str, int] = {
    "cpus_per_task": 1, "tasks_per_node": 1, "nodes": 1, "timeout_min": 1, "gpus_per_node": 0,
    "mem_gb": 0, "array_parallelism": 1, "max_num_timeout": 0,
}
# ray.init / ray.remote arguments kvbench's sweeps use, with their kind: (type, smallest value)
RAY_KINDS: dict[str, tuple[type, float | None]] = {
    "num_cpus": (int, 0), "num_gpus": (int, 0), "object_store_memory": (int, 1), "_memory": (int, 1),
    "memory": (int, 0), "max_retries": (int, -1), "max_calls": (int, 0),
    "address": (str, None), "namespace": (str, None), "_temp_dir": (str, None), "dashboard_host": (str, None),
    "include_dashboard": (bool, None), "local_mode": (bool, None), "ignore_reinit_error": (bool, None),
    "log_to_driver": (bool, None), "configure_logging": (bool, None), "resources": (dict, None),
    "runtime_env": (dict, None),
}


def _target(launcher: DictConfig) -> str:
    return str(launcher.get("_target_", "")).lower()


def check_launcher(launcher: DictConfig, multirun: bool = True) -> None:
    """Raise ConfigError for a launcher setting the launcher would fail on once started (the
    machine's SLURM only for a multirun: a single run does not use the launcher)."""
    target = _target(launcher)
    n_jobs = launcher.get("n_jobs")
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0):
        raise ConfigError(f"hydra.launcher.n_jobs must be an integer >= 1 (or -1 for every CPU); got {n_jobs!r}")
    if "joblib" in target:
        _check_joblib(launcher)
    if "submitit" in target:
        _check_submitit(launcher, slurm="slurm" in target and multirun)
    if "ray_launcher" in target and "aws" not in target:
        ray = launcher.get("ray") or {}
        _check_ray_args("hydra.launcher.ray.init", ray.get("init"), _ray_function("init"))
        _check_ray_args("hydra.launcher.ray.remote", ray.get("remote"), _ray_function("remote"))


def _check_joblib(launcher: DictConfig) -> None:
    for key, allowed in JOBLIB_CHOICES.items():
        value = launcher.get(key)
        if value not in allowed:
            names = ", ".join("null" if a is None else a for a in allowed)
            raise ConfigError(f"hydra.launcher.{key} must be one of {names}; got {value!r}")
    batch = launcher.get("batch_size")
    if batch != "auto" and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ConfigError(f"hydra.launcher.batch_size must be auto or an integer >= 1; got {batch!r}")
    timeout = launcher.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"hydra.launcher.timeout must be a number of seconds > 0 or null; got {timeout!r}")


def _check_submitit(launcher: DictConfig, slurm: bool) -> None:
    for key, minimum in SUBMITIT_MINIMUM.items():
        value = launcher.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"hydra.launcher.{key} must be an integer >= {minimum}; got {value!r}")
    if slurm:
        missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if missing:
            raise ConfigError(f"hydra/launcher=submitit_slurm needs SLURM ({' and '.join(missing)} not found on "
                              "PATH): run it on a SLURM login node, or use hydra/launcher=submitit_local")


def _ray_function(name: str):
    """``ray.init`` or ``ray.remote`` where Ray is installed (its parameters name what it takes)."""
    try:
        import ray  # optional dependency: the ray extra
    except ImportError:
        return None
    return getattr(ray, name, None)


def _ray_parameters(function) -> set[str] | None:
    """The keyword arguments a Ray function takes; None where it takes any."""
    if function is None:
        return None
    if getattr(function, "__name__", "") == "remote":
        try:
            from ray._private.ray_option_utils import task_options  # optional dependency: the ray extra

            return set(task_options)
        except ImportError:
            return None
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    named = {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    return named or None


def _check_ray_args(prefix: str, args, function) -> None:
    if args is None:
        return
    if not OmegaConf.is_dict(args):
        raise ConfigError(f"{prefix} must be a mapping of arguments; got {args!r}")
    values = OmegaConf.to_container(args, resolve=True)
    accepted = _ray_parameters(function)
    for key, value in values.items():
        if accepted is not None and key not in accepted and not key.startswith("_"):
            raise ConfigError(f"{prefix}.{key}: ray.{prefix.rsplit('.', 1)[1]} takes no such argument")
        if value is None or key not in RAY_KINDS:
            continue
        kind, minimum = RAY_KINDS[key]
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is int and isinstance(value, float) and value.is_integer():
            ok = True
        if not ok or (minimum is not None and value < minimum):
            what = {int: "an integer", str: "a string", bool: "true or false", dict: "a mapping"}[kind]
            bound = f" >= {minimum:g}" if minimum is not None else ""
            raise ConfigError(f"{prefix}.{key} must be {what}{bound}; got {value!r}")


def cluster_overrides(launcher: DictConfig) -> list[str]:
    """Overrides that make the Ray launcher join an existing cluster: it adds its own
    ``object_store_memory`` to ``ray.init`` unless the key is there, and Ray refuses that size when
    it connects to a running cluster (``init.address`` set). Null lets the cluster decide."""
    if "ray_launcher" not in _target(launcher):
        return []
    init = (launcher.get("ray") or {}).get("init") or {}
    if init.get("address") is None or "object_store_memory" in init:
        return []
    return ["+hydra.launcher.ray.init.object_store_memory=null"]
