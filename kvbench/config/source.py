"""Where the pre-check composes from: the same config search path as the Hydra app it guards.

``hydra.main`` composes from the package's ``conf/`` unless the command line says otherwise:
``--config-path``/``-cp`` (another primary directory), ``--config-name``/``-cn`` (another primary
file), ``--config-dir``/``-cd`` (a directory searched before ``conf/``), and ``hydra.searchpath``
(directories added after it, on the command line or in the primary config). ``hydra_source(args,
overrides)`` opens Hydra's global state with exactly that search path (Hydra's own functions build
it), so that a user's own ``gpu/mygpu.yaml`` or ``experiment/mine.yaml`` is checked as it will run.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, detect_calling_file_or_module_from_task_function
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import validate_config_path
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from kvbench.config.errors import CONF_DIR, ConfigError

DEFAULT_CONFIG_NAME = "config"


@dataclass
class ConfigSource:
    """The primary config's name, the ``hydra.searchpath`` overrides every compose must carry, and
    the folders of the search path beyond ``conf/`` (their sub-folders are config groups too)."""

    config_name: str = DEFAULT_CONFIG_NAME
    searchpath_overrides: list[str] = field(default_factory=list)
    extra_dirs: list[Path] = field(default_factory=list)

    def compose(self, overrides: list[str], return_hydra_config: bool = False) -> DictConfig:
        return compose(config_name=self.config_name, overrides=[*overrides, *self.searchpath_overrides],
                       return_hydra_config=return_hydra_config)

    def master(self, overrides: list[str]) -> DictConfig:
        """The multirun's own config, Hydra node included, as ``hydra -m`` composes it before its
        sweeper starts: the command line less its sweeps (``overrides``: the whole command line)."""
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        return hydra.compose_config(config_name=self.config_name, overrides=list(overrides),
                                    run_mode=RunMode.MULTIRUN, with_log_configuration=False)

    def group_names(self) -> set[str]:
        """The config groups a command line may choose, from every folder of the search path."""
        names = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
        for folder in self.extra_dirs:
            if folder.is_dir():
                names.update(p.name for p in folder.iterdir() if p.is_dir() and p.name != "hydra")
        return names


def searchpath_overrides(overrides: list[str]) -> list[str]:
    """The ``hydra.searchpath=[...]`` overrides of a command line (Hydra reads them as it composes)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == "hydra.searchpath"]


def _file_dirs(entries) -> list[Path]:
    """The local folders among search path entries (``file://DIR`` or a plain path)."""
    dirs = []
    for entry in entries or []:
        text = str(entry)
        if text.startswith("file://"):
            dirs.append(Path(text[len("file://"):]))
        elif "://" not in text:
            dirs.append(Path(text))
    return dirs


@contextmanager
def hydra_source(args, overrides: list[str], task_function: Callable) -> Iterator[ConfigSource]:
    """Hydra's global state composed from what ``hydra.main`` will use for these arguments;
    ``task_function`` is the app's (a relative ``--config-path`` is relative to its file)."""
    config_path = args.config_path if args.config_path is not None else str(CONF_DIR)
    validate_config_path(config_path)
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task_function)[:2]
    search_path = create_automatic_config_search_path(calling_file, calling_module, config_path)
    extra: list[Path] = []
    primary = next((p.path for p in search_path.get_path() if p.provider == "main"), "") or ""
    if primary.startswith("file://") and Path(primary[len("file://"):]) != CONF_DIR:
        extra.append(Path(primary[len("file://"):]))
    if args.config_dir is not None:
        config_dir = os.path.abspath(args.config_dir)
        if not os.path.isdir(config_dir):
            raise ConfigError(f"--config-dir: {config_dir} is not a directory")
        search_path.prepend(provider="command-line", path=f"file://{config_dir}",
                            anchor=SearchPathQuery(provider="schema"))
        extra.append(Path(config_dir))
    source = ConfigSource(config_name=args.config_name or DEFAULT_CONFIG_NAME,
                          searchpath_overrides=searchpath_overrides(overrides), extra_dirs=extra)
    previous = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
        source.extra_dirs.extend(_searchpath_dirs(source))
        yield source
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


def _searchpath_dirs(source: ConfigSource) -> list[Path]:
    """The folders ``hydra.searchpath`` adds, from the command line or else the primary config."""
    for override in OverridesParser.create().parse_overrides(source.searchpath_overrides):
        return _file_dirs(override.value())
    repo = GlobalHydra.instance().config_loader().repository  # type: ignore[attr-defined]
    loaded = repo.load_config(config_path=source.config_name)
    if loaded is None:
        return []
    return _file_dirs(OmegaConf.select(loaded.config, "hydra.searchpath", default=None))
