"""Count the outcomes of the runtime census (issue 31, part 3) against a checkout.

    PYTHONPATH=. python scripts/runtime_census.py [--root CHECKOUT] [--signals 12] [--only SUBSTR] [--json OUT]

The cases are ``tests/census_runtime.py``'s: the in-process ones (trace records, W&B leftovers)
run in one child process with ``PYTHONPATH=CHECKOUT``; every process case runs
``python -m kvbench.app`` from CHECKOUT in its own scratch folder. ``--signals`` is the number
of random-delay signal cases (0.6-1.6 s after kvbench's first handler is in place).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import census_runtime as cr  # noqa: E402

OUTCOMES = ("right", "silent", "traceback", "lost", "unclear", "refused valid", "skipped")


def inprocess(root: Path, only: str | None) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(root), WANDB_SILENT="true", WANDB_MODE="offline")
    out = subprocess.run([sys.executable, str(HERE / "tests" / "census_runtime.py")], env=env,
                         capture_output=True, text=True, timeout=1800).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [r for r in rows if not only or only in r["case"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--signals", type=int, default=12)
    parser.add_argument("--only")
    parser.add_argument("--no-processes", action="store_true")
    parser.add_argument("--no-inprocess", action="store_true")
    parser.add_argument("--skip", default="", help="comma-separated substrings of process cases to leave out")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = args.root.resolve()
    t0 = time.time()
    results = [] if args.no_inprocess else inprocess(root, args.only)
    skip = [x for x in args.skip.split(",") if x]
    if not args.no_processes:
        scratch = Path(tempfile.mkdtemp(prefix="census-runtime-"))
        for number, (name, case) in enumerate(cr.process_cases(args.signals).items()):
            if (args.only and args.only not in name) or any(x in name for x in skip):
                continue
            try:
                result = case(root, scratch / str(number))
            except Exception as exc:  # noqa: BLE001 - the harness itself broke on this case
                result = {"outcome": "traceback", "detail": f"harness: {type(exc).__name__}: {exc}"}
            results.append({"case": name, **result})
            print(f"{name:<44} {result['outcome']:<10} {result.get('exit', '')} {result.get('detail', '')[:90]}",
                  flush=True)
        shutil.rmtree(scratch, ignore_errors=True)
    counts = collections.Counter(r["outcome"] for r in results)
    for r in results:
        if r["outcome"] != "right":
            print(f"  {r['case']:<44} {r['outcome']:<10} {str(r.get('detail', ''))[:110]}")
    print(f"\n{len(results)} cases against {root} in {time.time() - t0:.0f} s")
    print("| outcome | cases |\n| --- | --- |")
    for outcome in OUTCOMES:
        print(f"| {outcome} | {counts.get(outcome, 0)} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
