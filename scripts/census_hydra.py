"""Count the Hydra census (tests/census_hydra_cases.py) on a checkout of kvbench: right, silent,
traceback, lost, and refused with another line. Runs the pre-check in-process.

    python scripts/census_hydra.py [--code DIR] [--show]

``--code`` runs the pre-check of another checkout (e.g. one before the fix) on the same cases.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _load_cases():
    spec = importlib.util.spec_from_file_location("census_hydra_cases", HERE / "tests" / "census_hydra_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["census_hydra_cases"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=HERE, help="the kvbench checkout to test")
    parser.add_argument("--show", action="store_true", help="print every case's outcome")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    warnings.filterwarnings("ignore")
    cc = _load_cases()
    from kvbench.run import precheck as app  # precheck and its NOTES
    from kvbench.config.errors import CONF_DIR

    counts: collections.Counter = collections.Counter()
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as tmp:
        user = cc.make_user_dir(Path(tmp) / "userconf", CONF_DIR)
        for case in cc.cases():
            results = Path(tmp) / "results" / case.name
            raised, error = False, None
            try:
                error = app.precheck(cc.args_for(case, user, CONF_DIR, results))
            except BaseException as exc:  # noqa: BLE001 - a traceback is what this counts
                raised, error = True, f"{type(exc).__name__}: {exc}"
            notes = list(getattr(app, "NOTES", {}))
            outcome = cc.classify(case, error, raised, notes)
            if results.exists():
                outcome = "wrote"
            counts[outcome] += 1
            by_kind[case.kind][outcome] += 1
            if args.show or outcome != "right":
                print(f"{outcome:9} {case.name}: {error if error else (notes or 'passed')}")
    print(f"{sum(counts.values())} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for kind, c in by_kind.items():
        print(f"  {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))


if __name__ == "__main__":
    main()
