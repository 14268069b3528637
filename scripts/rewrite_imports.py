"""Rewrite references to kvbench's old flat modules to their new homes (issue 32's layout; the map below).

Usage: ``python scripts/rewrite_imports.py [--check] PATH...`` (default: the current tree).

Rewrites, in ``.py``, ``.md``, ``.yaml``, ``.toml``, ``.sh``, ``.cfg`` and ``Makefile`` files:
- ``from kvbench.X import a, b`` (one line or parenthesized): each name goes to the module that
  holds it now, one ``from`` line per destination;
- ``from kvbench import X`` and ``import kvbench.X [as Y]``;
- every other dotted mention ``kvbench.X`` or ``kvbench.X.name`` (``mock.patch`` strings,
  ``_target_`` in configs, entry points ``kvbench.X:main``, prose in docs, ``python -m kvbench.X``).

It is idempotent: a name already in its new home is left alone, so it can be rerun after a
merge over code written against the old layout. ``--check`` lists the files it would change and
exits 1 if there are any.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# old module -> new module (for everything the old module held, unless SYMBOLS says otherwise)
MODULES: dict[str, str] = {
    "kvbench.compare": "kvbench.results.compare",
    "kvbench.config": "kvbench.config.compose",
    "kvbench.demo": "kvbench.run.demo",
    "kvbench.jobresult": "kvbench.run.jobresult",
    "kvbench.knob_types": "kvbench.config.knob_types",
    "kvbench.naming": "kvbench.results.naming",
    "kvbench.provenance": "kvbench.run.provenance",
    "kvbench.query": "kvbench.results.query",
    "kvbench.reindex": "kvbench.results.reindex",
    "kvbench.results": "kvbench.results.store",
    "kvbench.resultsdir": "kvbench.results.resultsdir",
    "kvbench.run_figures": "kvbench.run.run_figures",
    "kvbench.rundir": "kvbench.run.rundir",
    "kvbench.signals": "kvbench.run.signals",
    "kvbench.sweep": "kvbench.run.sweep",
    "kvbench.sweeper_checks": "kvbench.config.sweeper_checks",
    "kvbench.validate": "kvbench.config.validate",
    # modules that landed on main beside the move (placed by the merge, docs/architecture.md)
    "kvbench.config_source": "kvbench.config.source",
    "kvbench.conflicts": "kvbench.config.conflicts",
    "kvbench.launcher_checks": "kvbench.config.launcher_checks",
    "kvbench.grouping": "kvbench.results.grouping",
    "kvbench.progress": "kvbench.run.progress",
    "kvbench.keepup": "kvbench.engine.keepup",
    "kvbench.offload": "kvbench.sim.offload",
    "kvbench.plot": "kvbench.tools.plot",
    "kvbench.plot_data": "kvbench.tools.plot_data",
    "kvbench.report": "kvbench.tools.report",
    "kvbench.capacity": "kvbench.tools.capacity",
    "kvbench.slo": "kvbench.tools.slo",
}

# (old module, name) -> new module, for the names a split sent elsewhere than MODULES says
SYMBOLS: dict[tuple[str, str], str] = {
    ("kvbench.config", "ConfigError"): "kvbench.config.errors",
    ("kvbench.config", "CONF_DIR"): "kvbench.config.errors",
    ("kvbench.results", "main"): "kvbench.results.cli",
    ("kvbench.results", "_maintain"): "kvbench.results.cli",
    ("kvbench.results", "_format_cell"): "kvbench.results.cli",
    ("kvbench.results", "_markdown"): "kvbench.results.cli",
    ("kvbench.results", "_groups"): "kvbench.results.cli",
    ("kvbench.results", "ResultsError"): "kvbench.results.store",
    ("kvbench.results", "check_index_path"): "kvbench.results.reindex",
    ("kvbench.results", "clean"): "kvbench.results.reindex",
    ("kvbench.results", "reindex"): "kvbench.results.reindex",
    ("kvbench.results", "run_dirs"): "kvbench.results.store",
    ("kvbench.reindex", "ResultsError"): "kvbench.results.store",
    ("kvbench.reindex", "run_dirs"): "kvbench.results.store",
    ("kvbench.reindex", "summary_row"): "kvbench.results.store",
    ("kvbench.reindex", "unindexed_rows"): "kvbench.results.store",
}
# names that moved again after the first (moves-only) commit: code rewritten with --moves-only
INTERIM = {"kvbench.config.compose": ("ConfigError", "CONF_DIR"),
           "kvbench.results.store": ("main", "_maintain", "_format_cell", "_markdown", "_groups", "check_index_path",
                                     "clean", "reindex"),
           "kvbench.results.reindex": ("ResultsError", "run_dirs", "summary_row", "unindexed_rows")}
for _module, _names in INTERIM.items():
    _old = {"kvbench.config.compose": "kvbench.config", "kvbench.results.store": "kvbench.results",
            "kvbench.results.reindex": "kvbench.reindex"}[_module]
    for _name in _names:
        SYMBOLS[(_module, _name)] = SYMBOLS[(_old, _name)]
# names moved out of modules that themselves stay (the hf/attention <-> hf/features circle)
STAYING = {("kvbench.hf.features", "probe_layers"): "kvbench.hf.probe",
           ("kvbench.hf.features", "_check_token_independence"): "kvbench.hf.probe"}
SYMBOLS.update(STAYING)
# kvbench.app: what stays in the thin entry module; every other name went into kvbench/run/
APP_KEEPS = {"main"}
APP_SYMBOLS: dict[str, str] = {}
for _name in ("KVBENCH_ERRORS", "_errors", "Prepared", "prepare", "_kv_bytes", "_allocator", "_window_knob",
              "_workload", "_WORKLOADS"):
    APP_SYMBOLS[_name] = "kvbench.run.prepare"
for _name in ("run", "_identity", "_length_stats", "_trace_stats", "_scheduling", "_stop_token_ids",
              "_serving", "_extras", "_save_npz", "_log"):
    APP_SYMBOLS[_name] = "kvbench.run.lifecycle"
for _name in ("new_run_id", "PINNED_IDS", "_id_resolver", "_looks_like_run_id"):
    APP_SYMBOLS[_name] = "kvbench.run.ids"
for _name in ("SHOW_COLUMNS", "format_table", "_job_label", "_progress_bar"):
    APP_SYMBOLS[_name] = "kvbench.run.console"
for _name in ("_offload_columns",):
    APP_SYMBOLS[_name] = "kvbench.run.lifecycle"
for _name in ("check_job", "check_composed", "_check_hf", "precheck", "_split_argv", "_job_overrides", "_plan_output_dirs",
              "PLANNED", "_OUTPUT_KEYS", "NOTES", "_check_sim_family", "_struct_hint", "EXTRAS", "_extra_hint",
              "SEARCH_DIRS"):
    APP_SYMBOLS[_name] = "kvbench.run.precheck"
for _name in ("_hydra_main", "hydra_job", "_job", "_run_dir_and_id", "_nothing_served", "_objective", "error_line",
              "job_failed", "_finish_logger", "_stop_and_clean", "hydra_entry", "_interrupted", "_signal_wins",
              "_last_word", "_EXIT", "_main", "_claim", "_clean_after_hydra"):
    APP_SYMBOLS[_name] = "kvbench.run.job"
for _name, _dest in APP_SYMBOLS.items():
    SYMBOLS[("kvbench.app", _name)] = _dest

# new subpackages' module names: ``kvbench.results.store`` is new, never the old ``kvbench.results``
NEW_SUBMODULES = {new.rsplit(".", 1)[1] for new in [*MODULES.values(), *SYMBOLS.values()]} | {"cli", "errors", "spec"}
PACKAGES = {"kvbench.config", "kvbench.results"}  # old modules whose names are now packages
# submodule names that no old module's attribute shares (``validate``, ``compare`` and ``reindex``
# were also functions of the old modules: in ``from kvbench.results import compare`` they are the function)
NEW_ONLY = NEW_SUBMODULES - {"validate", "compare", "reindex"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt"}
OLD = sorted({*MODULES, "kvbench.app", *INTERIM, *(m for m, _ in STAYING)}, key=len, reverse=True)
_OLD_RE = "|".join(re.escape(m) for m in OLD)


def destination(old: str, name: str | None) -> str:
    """Where ``old``'s ``name`` lives now (``old`` itself when nothing moved)."""
    if name is not None and (old, name) in SYMBOLS and not MOVES_ONLY:
        return SYMBOLS[(old, name)]
    return MODULES.get(old, old)


def _split_names(text: str) -> list[tuple[str, str | None]]:
    names = []
    text = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for part in text.replace("(", " ").replace(")", " ").replace("\\\n", " ").split(","):
        part = part.strip()
        if not part:
            continue
        bits = part.split()
        names.append((bits[0], bits[2] if len(bits) == 3 and bits[1] == "as" else None))
    return names


_FROM = re.compile(rf"^(?P<indent>[ \t]*)from (?P<mod>{_OLD_RE}) import (?P<names>\([^)]*\)|[^\n#]*?)"
                   rf"(?P<comment>[ \t]*#[^\n]*)?$", re.M)


def _rewrite_from(match: re.Match) -> str:
    indent, old, comment = match["indent"], match["mod"], match["comment"] or ""
    if not comment and "#" in match["names"]:  # ``import (  # noqa: E402``
        comment = "  #" + match["names"].split("#", 1)[1].splitlines()[0]
    by_dest: dict[str, list[str]] = {}
    for name, alias in _split_names(match["names"]):
        if old in PACKAGES and name in NEW_ONLY:
            dest = old  # ``from kvbench.config import errors``: already the new package
        else:
            dest = destination(old, name)
        by_dest.setdefault(dest, []).append(f"{name} as {alias}" if alias else name)
    if list(by_dest) == [old]:
        return match[0]
    if len(by_dest) == 1:  # one destination: keep the statement's own layout and comments
        return match[0].replace(f"from {old} import", f"from {next(iter(by_dest))} import", 1)
    lines = []
    for i, (dest, names) in enumerate(by_dest.items()):
        line = f"{indent}from {dest} import {', '.join(names)}"
        lines.append(line + (comment if i == 0 else ""))
    return "\n".join(lines)


_FROM_PKG = re.compile(r"^(?P<indent>[ \t]*)from kvbench import (?P<names>[^\n#(]+?)(?P<comment>[ \t]*#[^\n]*)?$", re.M)


def _rewrite_from_pkg(match: re.Match) -> str:
    lines, kept = [], []
    for name, alias in _split_names(match["names"]):
        new = MODULES.get(f"kvbench.{name}")
        if new is None:
            kept.append(f"{name} as {alias}" if alias else name)
            continue
        package, module = new.rsplit(".", 1)
        local = alias or name
        lines.append(f"{match['indent']}from {package} import {module}" + (f" as {local}" if local != module else ""))
    if kept:
        lines.insert(0, f"{match['indent']}from kvbench import {', '.join(kept)}")
    if not lines or (kept and len(lines) == 1):
        return match[0]
    return "\n".join(lines[:1]) + (match["comment"] or "") + "".join("\n" + ln for ln in lines[1:])


_IMPORT = re.compile(rf"^(?P<indent>[ \t]*)import (?P<mod>{_OLD_RE})(?P<alias> as \w+)?(?=[ \t]*(#|$))", re.M)


def _rewrite_import(match: re.Match) -> str:
    old = match["mod"]
    new = MODULES.get(old, old)
    if new == old:
        return match[0]
    alias = match["alias"] or f" as {old.rsplit('.', 1)[1]}"  # keep the name the code uses
    return f"{match['indent']}import {new}{alias}"


_DOTTED = re.compile(rf"(?<![\w.])(?P<mod>{_OLD_RE})(?P<rest>(?:[.:][A-Za-z_]\w*)?)(?![\w/])")


def _rewrite_dotted(match: re.Match) -> str:
    old, rest = match["mod"], match["rest"]
    if match.string[max(0, match.start() - 3):match.start()] == "-m " or match.string[
            max(0, match.start() - 7):match.start()] == '"-m", "':
        # ``python -m kvbench.app`` and ``-m kvbench.results`` still work (kept modules)
        return match[0] if old in RUNNABLE else MODULES.get(old, old) + rest
    name = rest[1:] if rest else None
    if old in PACKAGES and (name in NEW_SUBMODULES or match.string.startswith(" import ", match.end())):
        return match[0]  # already a new name: ``kvbench.results.store``, ``from kvbench.results import cli``
    if name is not None and rest.startswith(".") and old.rsplit(".", 1)[1] == "app" and name not in SYMBOLS_APP:
        return match[0]
    return destination(old, name) + rest


MOVES_ONLY = False  # --moves-only: the file moves alone, before any split (the layout's first commit)
RUNNABLE = {"kvbench.app", "kvbench.results"}  # python -m keeps working on these
SYMBOLS_APP = {name for (mod, name) in SYMBOLS if mod == "kvbench.app"}


def rewrite(text: str, python: bool) -> str:
    """``text`` with every old kvbench module name replaced by its new home."""
    if python:
        text = _FROM.sub(_rewrite_from, text)
        text = _FROM_PKG.sub(_rewrite_from_pkg, text)
        text = _IMPORT.sub(_rewrite_import, text)
    return _DOTTED.sub(_rewrite_dotted, text)


def _files(paths: list[Path]):
    for path in paths:
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if any(part.startswith(".") or part in ("__pycache__", "node_modules") for part in file.parts):
                continue
            if file.is_file() and (file.suffix in SUFFIXES or file.name == "Makefile"):
                yield file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path(".")])
    parser.add_argument("--check", action="store_true", help="list the files that would change; exit 1 if any")
    parser.add_argument("--moves-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global MOVES_ONLY
    MOVES_ONLY = args.moves_only
    me = Path(__file__).resolve()
    changed = []
    for file in _files(args.paths):
        if file.resolve() == me or file.name == "layout-move.md":
            continue
        try:
            text = file.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        new = rewrite(text, file.suffix == ".py")
        if new != text:
            changed.append(file)
            if not args.check:
                file.write_text(new)
    for file in changed:
        print(file)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
