"""The project's modules import each other without a circle, function-local imports included;
every function-local import says why it is one (an optional dependency or start-up time); the KV
geometry is derived in one place; kvbench/ keeps at most 8 top-level modules besides its
subpackages (docs/architecture.md)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kvbench", "allocators", "kernels", "paper_figs")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imported(node: ast.AST, here: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The project modules an import statement loads (a ``from X import name`` of a submodule: that one)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = here if is_package else here.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                package = package.rsplit(".", 1)[0]
            base = f"{package}.{base}" if base else package
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = graph.setdefault(name, set())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(m for m in _imported(node, name, path.name == "__init__.py", known) if m != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None. A package's import of its
    own parent package is left out: loading a submodule loads its package first in any case."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_no_import_circle_anywhere():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_walk_finds_a_circle_when_there_is_one():
    graph = import_graph()
    graph["kvbench.results.store"].add("kvbench.results.reindex")  # the circle this layout broke
    assert find_cycle(graph) is not None
    assert "kvbench.config.compose" in graph["kvbench.run.prepare"]  # edges are read, not guessed


def test_kvbench_keeps_at_most_eight_top_level_modules():
    modules = sorted(p.name for p in (ROOT / "kvbench").glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 8, modules


def unexplained_local_imports(root: Path, paths) -> list[str]:
    """``path:line`` of each import inside a function with no comment on its line or the line above,
    unless it directly follows (no blank line) an explained one: a block under one comment."""
    found = []
    for path in paths:
        lines = path.read_text().splitlines()
        explained_until = 0  # last line of the current explained block of local imports
        nodes = {node.lineno: node for fn in ast.walk(ast.parse("\n".join(lines)))
                 if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
        for lineno in sorted(nodes):
            node = nodes[lineno]
            above = lines[lineno - 2].strip() if lineno >= 2 else ""
            if "#" in lines[lineno - 1] or above.startswith("#") or explained_until == lineno - 1:
                explained_until = node.end_lineno
            else:
                found.append(f"{path.relative_to(root)}:{lineno}")
    return found


def test_every_function_local_import_says_why():
    paths = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert unexplained_local_imports(ROOT, paths) == [], "move to the module top, or comment: optional dependency / start-up time"


def test_the_local_import_check_catches_one_without_a_comment(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    import json  # start-up time\n    import csv\n\n"
                                   "def g():\n    import os\n")
    assert unexplained_local_imports(tmp_path, [tmp_path / "m.py"]) == ["m.py:6"]


def test_the_kv_geometry_is_derived_in_one_place():
    """``KVGeometry.from_model_cfg`` is called once outside tests: ``kvbench.config.spec.model_geometry``."""
    calls = []
    for folder in (*PACKAGES, "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_model_cfg":
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith("kvbench/config/spec.py:"), calls


def test_each_top_level_package_is_the_projects_own_from_an_installed_script(tmp_path):
    """A console script (``kvbench``) runs with site-packages ahead of the editable install: a
    dependency that installs a package of the same top-level name (Hugging Face's ``kernels``,
    required by transformers 5.25) would shadow the project's own. Imported as a script would,
    from outside the checkout, each must come from here."""
    import subprocess
    import sys

    packages = ("kvbench", "allocators", "kernels", "paper_figs")
    probe = "import importlib, sys; print('\\n'.join(importlib.import_module(p).__file__ for p in sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", probe, *packages], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    for name, path in zip(packages, out.stdout.split()):
        assert Path(path).resolve().is_relative_to(ROOT), f"{name} imports from {path}, not the project"
