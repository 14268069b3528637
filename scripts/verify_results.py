"""Rerun a random sample of committed runs on the current code and fail on any difference.

    PYTHONPATH=. .venv/bin/python scripts/verify_results.py [--root results/paper] [--sample 8]
        [--seed 0] [--per-experiment K] [--max-wall 30] [--experiment NAME ...] [--list-only] [--json FILE]

Each committed ``summary.json`` under ROOT is rerun from its own config: the Hydra overrides it
recorded (``overrides``, written by every run since provenance was added), or, for runs older
than that, the overrides rebuilt from its experiment file (``conf/experiment/*.yaml`` with the
same ``experiment_name``, the sweep value of each swept key read back from the row). Every
column of the committed summary is compared with the rerun's, except these (not results):

- ``run_id``, ``run_dir``: the run's name and where it is stored;
- ``wall_s``, ``schedule_s_per_token``: host wall-clock time of the simulation and of its
  scheduler, which vary with machine load (the virtual clock never reads them);
- ``commit``, ``tree_clean``, ``overrides``: provenance, which names the code, not its output.

Before any rerun, the store itself is checked (``check_store``): every ``index.jsonl`` under ROOT
against the run folders next to it. Each index line must be a JSON object whose ``nonfinite``
field is well formed, whose ``run_dir`` holds a readable ``summary.json`` with the same run_id,
and whose every column equals that summary's (a metric edited in the index is named); a run
folder with no index row, a run_id indexed twice, a summary.json that is torn, not an object or
has malformed ``overrides`` are named too. Any such finding fails the check (exit 1) whatever the
reruns say.

Numbers must agree to 1e-9 relative (the simulation is deterministic; the margin only absorbs
a last-bit change of a float sum). A column the rerun has and the committed run lacks (added by
later code) is listed, not failed. Exit 1 on any difference or rerun error, 0 otherwise.
``--max-wall`` skips runs whose recorded ``wall_s`` exceeds it (the one-hour traces take minutes).
Only simulated runs (``backend`` sim) are rerun: a run of the real model (the CPU token-time
study) is timed on real hardware, so it cannot repeat its numbers, and is left out.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvbench.config.errors import CONF_DIR  # noqa: E402
from kvbench.run.provenance import PROVENANCE_COLUMNS  # noqa: E402
from kvbench.results.store import decode_nonfinite  # noqa: E402

EXCLUDED = ("run_id", "run_dir", "wall_s", "schedule_s_per_token", *PROVENANCE_COLUMNS)
REL_TOL = 1e-9
# Overrides every rerun gets: no progress bar, no logger, results into a scratch folder.
RERUN_OVERRIDES = ("progress=false", "logger=none")
# The summary column that holds each swept key's value.
SWEPT_COLUMN = {
    "allocator": "allocator_label", "+baseline": "baseline", "seed": "seed", "workload.n": "n",
    "workload.beam_width": "beam_width", "workload.request_rate": "request_rate",
    "allocator.block_size": "block_size", "engine.preemption": "preemption",
    "workload.prefix_len": "prefix_len", "engine.kv_cache_bytes": "kv_bytes",
}


@dataclass
class Outcome:
    path: Path
    overrides: list[str]
    differences: list[str] = field(default_factory=list)
    new_columns: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.differences


def committed_runs(root: Path) -> list[Path]:
    return sorted(root.glob("**/summary.json"))


INDEX_FILE = "index.jsonl"


def _read_summary(path: Path) -> tuple[dict | None, str | None]:
    """A summary.json decoded (infinities back), or None and why it cannot be read."""
    try:
        row = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc})"
    except ValueError as exc:
        return None, f"not JSON (torn or edited: {exc})"
    if not isinstance(row, dict) or not isinstance(row.get("run_id"), str) or not row["run_id"]:
        return None, "not a summary (a JSON object with a run_id)"
    try:
        row = decode_nonfinite(row)
    except ValueError as exc:
        return None, str(exc)
    problem = _overrides_problem(row.get("overrides"))
    return (None, problem) if problem else (row, None)


def _overrides_problem(recorded: object) -> str | None:
    """Why a recorded ``overrides`` field cannot be rerun (None when it can, or none was recorded)."""
    if recorded is None:
        return None
    try:
        items = json.loads(recorded) if isinstance(recorded, str) else None
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(isinstance(o, str) and "=" in o for o in items):
        return f"overrides {str(recorded)[:80]!r} is not a JSON list of KEY=VALUE strings"
    return None


def _index_of(run_dir: Path, root: Path) -> Path | None:
    """The nearest index.jsonl above a run folder, inside root."""
    for folder in run_dir.parents:
        if (folder / INDEX_FILE).is_file():
            return folder / INDEX_FILE
        if folder == root:
            return None
    return None


def check_store(root: Path) -> list[str]:
    """Every disagreement between the index files under root and the run folders, one line each."""
    problems: list[str] = []
    indexed: set[Path] = set()
    for index in sorted(root.glob(f"**/{INDEX_FILE}")):
        name = index.relative_to(root)
        seen: dict[str, int] = {}
        lines = index.read_bytes().decode("utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            where = f"{name}:{number}"
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                problems.append(f"{where}: not a JSON line (torn or edited)")
                continue
            if not isinstance(row, dict) or not isinstance(row.get("run_id"), str):
                problems.append(f"{where}: not an index row (a JSON object with a run_id)")
                continue
            try:
                row = decode_nonfinite(row)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
            run_id = row["run_id"]
            if run_id in seen:
                problems.append(f"{where}: run {run_id} is indexed twice (also line {seen[run_id]})")
            seen[run_id] = number
            run_dir = row.get("run_dir")
            folder = index.parent / run_dir if isinstance(run_dir, str) and run_dir else None
            if folder is None or not (folder / "summary.json").is_file():
                problems.append(f"{where}: run {run_id}: no run folder with a summary.json at {run_dir!r} "
                                "(deleted, or a row no run wrote)")
                continue
            indexed.add((folder / "summary.json").resolve())
            summary, why = _read_summary(folder / "summary.json")
            if summary is None:
                problems.append(f"{where}: run {run_id}: {folder.relative_to(root)}/summary.json {why}")
                continue
            if summary["run_id"] != run_id:
                problems.append(f"{where}: row says run {run_id}, its folder's summary.json says {summary['run_id']}")
                continue
            for key in sorted(set(row) | set(summary)):
                if key == "run_dir":
                    continue
                old, new = summary.get(key, "missing"), row.get(key, "missing")
                if not _same(old, new):
                    problems.append(f"{where}: run {run_id}: {key} is {new!r} in the index, {old!r} in summary.json")
    for path in committed_runs(root):
        if path.resolve() in indexed:
            continue
        index = _index_of(path.parent, root)
        rel = path.parent.relative_to(root)
        summary, why = _read_summary(path)
        if summary is None:
            problems.append(f"{rel}/summary.json: {why}")
        elif index is not None:
            problems.append(f"{rel}: a finished run with no row in {index.relative_to(root)}")
    return problems


def _experiment_files() -> dict[str, list[Path]]:
    """experiment_name -> the experiment files that write runs under it."""
    out: dict[str, list[Path]] = {}
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        name = OmegaConf.load(path).get("experiment_name")
        if name:
            out.setdefault(str(name), []).append(path)
    return out


def _matches(key: str, value: str, row: dict) -> bool:
    got = row.get(SWEPT_COLUMN[key])
    if key == "engine.kv_cache_bytes":  # the pool is the knob rounded down to whole blocks
        return got is not None and 0 <= float(value) - float(got) < 0.01 * float(value)
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        try:
            return math.isclose(float(value), float(got))
        except ValueError:
            return False
    return str(value) == str(got)


def rebuilt_overrides(row: dict, files: dict[str, list[Path]]) -> list[list[str]]:
    """Candidate override lists for a run that recorded none (one per matching experiment file)."""
    candidates = []
    for path in files.get(str(row["experiment"]), []):
        params = OmegaConf.to_container(OmegaConf.load(path)).get("hydra", {}).get("sweeper", {}).get("params", {})
        chosen = [f"experiment={path.stem}"]
        for key, values in params.items():
            if key not in SWEPT_COLUMN:
                break
            hits = [v.strip() for v in str(values).split(",") if _matches(key, v.strip(), row)]
            if len(hits) != 1:
                break
            chosen.append(f"{key}={hits[0]}")
        else:
            candidates.append(chosen)
    return candidates


def _identity_matches(cfg, row: dict) -> bool:
    """Whether a composed config gives the row's model, GPU profile, workload and every swept knob's value
    (a knob its experiment does not sweep must still hold the row's value: beam width 6 is not
    the parallel-sampling study's run)."""
    if cfg.model.name != row["model"] or row.get("gpu_profile") not in (None, cfg.gpu.name):
        return False
    stream = str(row["workload"]).split("(")[0].replace("-", "_")  # system_prompts(sharegpt,K=4)
    workload = str(cfg.workload.name).replace("-", "_")
    if stream != workload and not stream.startswith(workload + "_"):  # alpaca -> alpaca_synthetic
        return False
    for key, column in SWEPT_COLUMN.items():
        path = key.lstrip("+")
        if path.split(".")[0] in ("allocator", "engine") and column in ("allocator_label", "kv_bytes"):
            continue  # named by a config choice or rounded: matched when the overrides were built
        value = OmegaConf.select(cfg, path, default=None)
        if value is not None and column in row and not _matches(key, str(value), row):
            return False
    return True


def compose(overrides: list[str], results_dir: str):
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config",
                             overrides=[*overrides, *RERUN_OVERRIDES, f"results_dir={results_dir}"])


def compare(committed: dict, fresh: dict) -> tuple[list[str], list[str]]:
    """Differences (one line each) and the columns only the rerun has."""
    diffs = []
    for key, old in committed.items():
        if key in EXCLUDED:
            continue
        if key not in fresh:
            diffs.append(f"{key}: {old!r} -> missing")
            continue
        new = fresh[key]
        if not _same(old, new):
            diffs.append(f"{key}: {old!r} -> {new!r}")
    new_cols = sorted(k for k in fresh if k not in committed and k not in EXCLUDED)
    return diffs, new_cols


def _same(old: object, new: object) -> bool:
    if isinstance(old, bool) or isinstance(new, bool) or old is None or new is None:
        return old == new
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        if math.isnan(old) or math.isnan(new):
            return math.isnan(old) and math.isnan(new)
        return math.isclose(old, new, rel_tol=REL_TOL, abs_tol=1e-12)
    return old == new


def verify(path: Path, files: dict[str, list[Path]]) -> Outcome:
    """Rerun one committed run and compare it."""
    from kvbench.run.lifecycle import run

    row, why = _read_summary(path)
    if row is None:
        return Outcome(path, [], error=f"summary.json {why}")
    recorded = row.get("overrides")
    with tempfile.TemporaryDirectory(prefix="kvbench-verify-") as tmp:
        if recorded:
            candidates = [[o for o in json.loads(recorded) if not o.startswith(("hydra", "results_dir="))]]
        else:
            candidates = rebuilt_overrides(row, files)
        try:
            cfgs = [(c, compose(c, tmp)) for c in candidates]
        except Exception as exc:  # noqa: BLE001 - overrides that no longer compose: a finding
            return Outcome(path, candidates[0] if candidates else [],
                           error=f"its overrides do not compose: {type(exc).__name__}: {exc}".splitlines()[0])
        cfgs = [(c, cfg) for c, cfg in cfgs if recorded or _identity_matches(cfg, row)]
        distinct = {}
        for c, cfg in cfgs:  # two experiment files may compose the same job (n=1 and beam 1)
            key = json.dumps(OmegaConf.to_container(cfg, resolve=False), sort_keys=True, default=str)
            distinct.setdefault(key.replace(str(cfg.get("experiment_name")), ""), (c, cfg))
        cfgs = list(distinct.values())
        if len(cfgs) != 1:
            return Outcome(path, candidates[0] if candidates else [],
                           error=f"{len(cfgs)} configs match this run (cannot rebuild its overrides)")
        overrides, cfg = cfgs[0]
        try:
            fresh = decode_nonfinite(json.loads(json.dumps(run(cfg, run_dir=Path(tmp) / "run"), default=str)))
            fresh["allocator_label"] = _label(fresh, overrides)
        except Exception as exc:  # noqa: BLE001 - a rerun that fails is a finding, reported per run
            return Outcome(path, overrides, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    diffs, new_cols = compare(row, fresh)
    return Outcome(path, overrides, diffs, new_cols)


def _label(fresh: dict, overrides: list[str]) -> str:
    """The label the Hydra app gives (it reads the allocator config chosen on the command line,
    which a run outside the app does not know)."""
    from kvbench.results.naming import allocator_label

    choice = next((o.split("=", 1)[1] for o in overrides if o.startswith("allocator=")), None)
    return allocator_label(str(fresh["allocator"]), fresh.get("reserve"), choice)


def sample(paths: list[Path], size: int, seed: int, max_wall: float | None, experiments: list[str],
           per_experiment: int = 0) -> list[Path]:
    """A seeded random sample of the runs that pass the filters (``per_experiment`` > 0: that
    many from each experiment name instead)."""
    keep = []
    for path in paths:
        row, _ = _read_summary(path)
        if row is None:  # named by check_store
            continue
        if row.get("backend") != "sim":
            continue
        if experiments and row.get("experiment") not in experiments:
            continue
        if max_wall is not None and float(row.get("wall_s") or 0.0) > max_wall:
            continue
        keep.append(path)
    rng = random.Random(seed)
    if per_experiment > 0:
        groups: dict[str, list[Path]] = {}
        for path in keep:
            groups.setdefault(str(_read_summary(path)[0]["experiment"]), []).append(path)
        return sorted(p for group in groups.values() for p in rng.sample(group, min(per_experiment, len(group))))
    return keep if size <= 0 or size >= len(keep) else sorted(rng.sample(keep, size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT / "results" / "paper")
    parser.add_argument("--sample", type=int, default=8, help="runs to rerun (0: every run that passes the filters)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random sample")
    parser.add_argument("--per-experiment", type=int, default=0, help="sample this many runs of each experiment")
    parser.add_argument("--max-wall", type=float, default=None, help="skip runs whose recorded wall_s is above this")
    parser.add_argument("--experiment", nargs="*", default=[], help="only these experiment names")
    parser.add_argument("--run", nargs="*", default=[], help="only these run ids")
    parser.add_argument("--list-only", action="store_true", help="print the sample and its overrides, run nothing")
    parser.add_argument("--json", type=Path, default=None, help="write each run's outcome to this JSON file")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"verify-results: error: --root {args.root} is not a directory", file=sys.stderr)
        return 2
    problems = check_store(args.root)
    for line in problems:
        print(f"STORE    {line}")
    paths = [p for p in committed_runs(args.root) if not args.run or p.parent.name in args.run]
    chosen = sample(paths, args.sample, args.seed, args.max_wall, args.experiment,
                    args.per_experiment)
    if not chosen:
        if problems:
            print(f"verify-results: {len(problems)} store problem(s); no run left to rerun")
            return 1
        print(f"verify-results: error: no committed run under {args.root} passes the filters", file=sys.stderr)
        return 2
    files = _experiment_files()
    outcomes = []
    for path in chosen:
        rel = path.parent.relative_to(args.root)
        if args.list_only:
            row = _read_summary(path)[0] or {}
            print(rel, row.get("overrides") or rebuilt_overrides(row, files))
            continue
        outcome = verify(path, files)
        outcomes.append(outcome)
        status = "ok" if outcome.ok else ("ERROR" if outcome.error else "DIFFERS")
        print(f"{status:8s} {rel}  {' '.join(outcome.overrides)}", flush=True)
        for line in ([outcome.error] if outcome.error else []) + outcome.differences[:12]:
            print(f"           {line}")
        if len(outcome.differences) > 12:
            print(f"           ... {len(outcome.differences) - 12} more")
    if args.list_only:
        return 1 if problems else 0
    bad = [o for o in outcomes if not o.ok]
    new_cols = sorted({c for o in outcomes for c in o.new_columns})
    if new_cols:
        print(f"columns the committed runs lack (not compared): {', '.join(new_cols)}")
    print(f"verify-results: {len(outcomes) - len(bad)} of {len(outcomes)} reruns identical"
          + (f"; {len(bad)} differ or fail" if bad else "")
          + (f"; {len(problems)} store problem(s) (index vs run folders)" if problems else "; store consistent"))
    if args.json:
        args.json.write_text(json.dumps([{"run": str(o.path.parent.relative_to(args.root)), "ok": o.ok,
                                          "overrides": o.overrides, "error": o.error,
                                          "differences": o.differences} for o in outcomes], indent=1))
    return 1 if bad or problems else 0


if __name__ == "__main__":
    sys.exit(main())
