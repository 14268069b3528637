"""Mutation testing of the core with mutmut, scored against the equivalent-mutant lists.

    python -m tests.mutation.run [--modules paged buddy ...] [--jobs 2] [--keep DIR] [--report F]

The run copies the working tree (tracked and new files, as ``git ls-files`` lists them) into a
temporary folder, writes mutmut's settings there from ``targets.py`` and runs ``mutmut run``, so
that nothing is written into the checkout. A mutant counts as caught when a test failed or timed
out on it. ``tests/mutation/equivalent/<module>.toml`` lists the mutants that cannot change
behaviour, each with the line mutmut wrote and the reason; an entry whose mutant is gone or whose
line changed is stale and fails the run. The score is caught / (all - equivalent), per module and
overall; the run fails below ``MIN_SCORE`` and prints every live mutant as a diff.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.mutation import targets

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT_DIR = Path(__file__).resolve().parent / "equivalent"
CAUGHT = {"killed", "timeout"}

# run inside the copy: prints {mutant: diff} for the names on stdin (mutmut's own diff)
_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in json.load(sys.stdin)}))
"""


@dataclass
class Tally:
    statuses: Counter = field(default_factory=Counter)
    equivalent: int = 0

    @property
    def counted(self) -> int:
        return sum(self.statuses.values()) - self.equivalent

    @property
    def caught(self) -> int:
        return sum(self.statuses[s] for s in CAUGHT)

    @property
    def score(self) -> float:
        return self.caught / self.counted if self.counted else 1.0


def copy_tree(dst: Path) -> None:
    """The working tree as git sees it (tracked plus new, unignored files)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def mutmut_settings(modules: list[str], root: Path) -> str:
    tests = targets.TESTS + sorted(str(p.relative_to(root)) for p in root.glob(targets.KILLER_TESTS_GLOB))
    settings = {
        "source_paths": ["allocators", "kvbench"],
        "only_mutate": [targets.MODULES[m] for m in modules],
        "also_copy": targets.ALSO_COPY,
        "pytest_add_cli_args": targets.PYTEST_ARGS,
        "pytest_add_cli_args_test_selection": tests,
    }
    return "\n[tool.mutmut]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())


def run_mutmut(work: Path, modules: list[str], jobs: int) -> None:
    with open(work / "pyproject.toml", "a") as f:
        f.write(mutmut_settings(modules, work))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    with open(work / "mutmut.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
                              cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = (work / "mutmut.log").read_text(errors="replace").replace("\r", "\n").splitlines()[-15:]
        raise SystemExit(f"mutmut run failed ({done.returncode}):\n" + "\n".join(tail))


def statuses(work: Path, modules: list[str]) -> dict[str, dict[str, str]]:
    """module -> {mutant name: mutmut's status}."""
    from mutmut.stats import status_by_exit_code

    out = {}
    for module in modules:
        meta = json.loads((work / "mutants" / (targets.MODULES[module] + ".meta")).read_text())
        out[module] = {name: status_by_exit_code[code] for name, code in meta["exit_code_by_key"].items()}
    return out


def diffs(work: Path, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    done = subprocess.run([sys.executable, "-c", _DIFFS], cwd=work, input=json.dumps(names),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def mutated_lines(diff: str) -> str:
    """The lines a mutant adds, stripped: what an equivalent entry must match."""
    return "\n".join(line[1:].strip() for line in diff.splitlines()
                     if line.startswith("+") and not line.startswith("+++"))


def equivalents(module: str) -> dict[str, dict]:
    path = EQUIVALENT_DIR / f"{module}.toml"
    if not path.exists():
        return {}
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    for entry in entries:
        missing = {"mutant", "mutated", "reason"} - set(entry)
        if missing or not str(entry.get("reason", "")).strip():
            raise SystemExit(f"{path.name}: an entry lacks {sorted(missing) or ['a reason']}: {entry}")
    return {entry["mutant"]: entry for entry in entries}


def score(work: Path, modules: list[str]) -> tuple[dict[str, Tally], dict[str, str], list[str]]:
    """Per-module tallies, the live mutants' diffs, and the stale equivalent entries."""
    found = statuses(work, modules)
    tallies, stale, live = {}, [], []
    equivalent_of = {m: equivalents(m) for m in modules}
    listed = [name for m in modules for name in equivalent_of[m]]
    all_diffs = diffs(work, [n for m in modules for n, s in found[m].items() if s not in CAUGHT] +
                      [n for n in listed if any(n in found[m] for m in modules)])
    for module in modules:
        tally = tallies[module] = Tally(Counter(found[module].values()))
        for name, entry in equivalent_of[module].items():
            if name not in found[module]:
                stale.append(f"{module}: {name} no longer exists")
            elif mutated_lines(all_diffs[name]) != entry["mutated"].strip():
                stale.append(f"{module}: {name} now writes {mutated_lines(all_diffs[name])!r}")
            elif found[module][name] in CAUGHT:
                stale.append(f"{module}: {name} is listed as equivalent but a test catches it")
            else:
                tally.equivalent += 1
        live += [n for n, s in found[module].items() if s not in CAUGHT and n not in equivalent_of[module]]
    return tallies, {n: all_diffs[n] for n in live}, stale


def report(tallies: dict[str, Tally], live: dict[str, str], stale: list[str], found_status) -> str:
    lines = ["| module | mutants | equivalent | caught | live | score |", "|---|---|---|---|---|---|"]
    total = Tally()
    for module, t in tallies.items():
        lines.append(f"| {module} | {sum(t.statuses.values())} | {t.equivalent} | {t.caught} | "
                     f"{t.counted - t.caught} | {t.score:.1%} |")
        total.statuses.update(t.statuses)
        total.equivalent += t.equivalent
    lines.append(f"| all | {sum(total.statuses.values())} | {total.equivalent} | {total.caught} | "
                 f"{total.counted - total.caught} | {total.score:.1%} |")
    for name, diff in sorted(live.items()):
        lines += ["", f"## {name} ({found_status(name)})", diff]
    lines += [f"stale equivalent entry: {s}" for s in stale]
    return "\n".join(lines), total.score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation.run", description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+", choices=sorted(targets.MODULES), default=list(targets.MODULES))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", type=Path, help="work in this new folder and keep it (rerun a survivor there)")
    parser.add_argument("--report", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    if args.keep and args.keep.exists():
        parser.error(f"--keep {args.keep}: already exists; give a new folder")
    work = args.keep or Path(tempfile.mkdtemp(prefix="kvbench-mutation-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        copy_tree(work)
        run_mutmut(work, args.modules, args.jobs)
        found = statuses(work, args.modules)
        tallies, live, stale = score(work, args.modules)
        text, overall = report(tallies, live, stale,
                               lambda n: next(s[n] for s in found.values() if n in s))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    if stale or overall < targets.MIN_SCORE:
        print(f"mutation score {overall:.1%} (needs {targets.MIN_SCORE:.0%}); "
              f"{len(stale)} stale equivalent entries", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
