"""Census of the bad inputs of ``tests/input_cases.py``: how many end in one clean line.

In-process (default): each case goes through ``kvbench.run.precheck.precheck``; a case is ``clean`` when
the pre-check returns one line, ``silent`` when it accepts the input, ``traceback`` when the
pre-check raises. ``--subprocess N`` also runs every N-th case as a real ``kvbench`` process
(exit code 2, exactly one stderr line, no traceback, no file written outside its results dir).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python scripts/input_census.py [--list silent]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from input_cases import all_cases, classify_process, run_process, with_results  # noqa: E402


def in_process(args: list[str], results: Path) -> tuple[str, str]:
    from kvbench.run.precheck import precheck

    try:
        error = precheck(with_results(args, results))
    except BaseException as exc:  # noqa: BLE001 - the census counts what escapes
        return "traceback", f"{type(exc).__name__}: {exc}".splitlines()[0]
    if error is None:
        return "silent", ""
    return ("clean" if "\n" not in error else "multi-line"), error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", choices=("clean", "silent", "traceback", "multi-line"), action="append", default=[])
    parser.add_argument("--subprocess", type=int, default=0, metavar="N", help="also run every N-th case as a process")
    args = parser.parse_args()
    cases = all_cases()
    counts: Counter[str] = Counter()
    proc_counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (case_id, overrides) in enumerate(cases):
            outcome, line = in_process(overrides, Path(tmp) / "results")
            counts[outcome] += 1
            if outcome in args.list:
                print(f"{outcome:10} {case_id}: {line}")
            if args.subprocess and i % args.subprocess == 0:
                verdict = classify_process(run_process(overrides, Path(tmp) / f"p{i}"))
                proc_counts[verdict] += 1
                if verdict != "clean" and verdict in args.list + ["silent", "traceback", "multi-line", "wrote"]:
                    print(f"process {verdict:10} {case_id}")
    print(f"{len(cases)} cases in-process: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if proc_counts:
        print(f"{sum(proc_counts.values())} as processes: " + ", ".join(f"{k} {v}" for k, v in sorted(proc_counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
