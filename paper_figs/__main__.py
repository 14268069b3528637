"""``python -m paper_figs NAME [NAME ...] | all | beyond | traces | hybrid``: draw paper figures from a results index.

``all`` is the paper's figures; ``beyond`` the post-2023 allocator figures (BEYOND_FIGURES);
``traces`` the production-trace figures (TRACE_FIGURES); ``hybrid`` the mixed-model figures (HYBRID_FIGURES).

Each figure picks its runs by experiment; a figure without data is skipped with a one-line
message. Exit code: 0 when at least one figure was drawn and none failed, 1 otherwise, 2 for
bad arguments or a missing index.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from paper_figs import BEYOND_FIGURES, FIGURES, HYBRID_FIGURES, TRACE_FIGURES, common

KNOWN = (*FIGURES, *BEYOND_FIGURES, *TRACE_FIGURES, *HYBRID_FIGURES)


def draw_figures(names: Sequence[str], index_path: str | Path, out_dir: str | Path,
                 results_root: str | Path | None = None, experiment: str | None = None,
                 ) -> dict[str, list[str]]:
    """Draw the named figures; return {"drawn": [...], "skipped": [...], "failed": [...]}."""
    index_df, root = common.load(index_path)
    root = Path(results_root) if results_root is not None else root
    outcome: dict[str, list[str]] = {"drawn": [], "skipped": [], "failed": []}
    for name in names:
        module = importlib.import_module(f"paper_figs.{name}")
        try:
            paths = module.draw(index_df, out_dir, root, experiment=experiment)
        except Exception as err:  # a bug or malformed results: report it, draw the others
            traceback.print_exc(file=sys.stderr)
            print(f"{name}: failed ({type(err).__name__}: {err})", flush=True)
            outcome["failed"].append(name)
            continue
        if paths:
            print(f"{name}: wrote {', '.join(str(p) for p in paths)}", flush=True)
            outcome["drawn"].append(name)
        else:
            outcome["skipped"].append(name)
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_figs", description=__doc__.split("\n")[0])
    parser.add_argument("figures", nargs="+", metavar="NAME",
                        help=f"'all', 'beyond', 'traces', 'hybrid' or figure names: {', '.join(KNOWN)}")
    parser.add_argument("--index", default="results/index.jsonl", help="results index (%(default)s)")
    parser.add_argument("--out", default="paper_figs/out", help="output folder (%(default)s)")
    parser.add_argument("--results-root", default=None,
                        help="folder the index's run_dir paths are relative to (the index's folder)")
    parser.add_argument("--experiment", default=None,
                        help="use this experiment instead of the figure's own (one figure only)")
    args = parser.parse_args(argv)

    groups = {"all": FIGURES, "beyond": BEYOND_FIGURES, "traces": TRACE_FIGURES, "hybrid": HYBRID_FIGURES}
    names = list(groups[args.figures[0]]) if len(args.figures) == 1 and args.figures[0] in groups \
        else list(dict.fromkeys(args.figures))
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; known: all, beyond, traces, hybrid, {', '.join(KNOWN)}")
    if args.experiment is not None and len(names) != 1:
        parser.error("--experiment applies to one figure; name exactly one")
    if not Path(args.index).is_file():
        print(f"paper_figs: no results index at {args.index} (run some experiments first)",
              file=sys.stderr)
        return 2

    outcome = draw_figures(names, args.index, args.out, args.results_root, args.experiment)
    if len(names) > 1:
        summary = "; ".join(f"{key}: {', '.join(v) or '-'}" for key, v in outcome.items())
        print(f"paper_figs: {summary}", flush=True)
    return 0 if outcome["drawn"] and not outcome["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
