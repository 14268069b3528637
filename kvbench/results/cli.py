"""``kvbench-results``: a comparison table of the runs in a results index, ``--compare`` and
``--export`` (``kvbench/results/compare.py``), ``--reindex`` and ``--clean`` (``kvbench/results/reindex.py``)."""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from kvbench.cli import OneLineParser, command
from kvbench.results.compare import (add_arguments, check_modes, check_sweep_dir, compare_or_export, note_all_null_sort,
                                     with_granularity)
from kvbench.results.grouping import GroupingError, distinct_settings, is_setting, settings_that_vary, split
from kvbench.results.naming import number
from kvbench.results.outputs import OutputError, check_target
from kvbench.results.query import QueryError, in_sweep, sort, where as select, with_labels
from kvbench.results.reindex import check_index_path, clean, reindex
from kvbench.results.store import (DEFAULT_COMPARE_COLUMNS, DEFAULT_INDEX, IndexLineError, ResultsError, compare, load_index,
                                   run_dirs)


def _format_cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return number(value)
    return str(value)


def _markdown(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(df.columns) + " |"
    rule = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(_format_cell(v) or "-" for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _groups(table: pd.DataFrame, by: Sequence[str] = ("experiment",)) -> Iterable[tuple[str, pd.DataFrame]]:
    if not by:
        yield "all runs", table
        return
    keys = table[list(by)].astype(object).apply(
        lambda row: ", ".join("(none)" if pd.isna(v) else str(v) for v in row), axis=1)
    for name in dict.fromkeys(keys):
        yield name, table.loc[keys == name].drop(columns=list(by))


FORMATS = ("table", "csv", "markdown")


class _UsageError(ValueError):
    """A command line argparse refuses; reported as one line."""


class _OneLineParser(OneLineParser):
    """argparse that reports a bad command line as one line (no usage block), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


@command("kvbench-results", on_signal="nothing was changed (an index rewrite is all or nothing)")
def main(argv: Sequence[str] | None = None) -> int:
    """``kvbench-results``: print a comparison table of index columns, grouped by experiment."""
    parser = _OneLineParser(
        prog="kvbench-results", description="Compare runs recorded in the results index."
    )
    parser.add_argument("--index", default=str(DEFAULT_INDEX), help="index file (%(default)s)")
    parser.add_argument(
        "--columns",
        default=",".join(DEFAULT_COMPARE_COLUMNS),
        help="comma-separated columns (default: %(default)s)",
    )
    parser.add_argument("--experiment", help="only runs of this experiment")
    parser.add_argument("--group-by", default="experiment",
                        help="comma-separated columns, one table per value (%(default)s; '' for one table)")
    parser.add_argument("--sort", default="", help="comma-separated columns; -COL sorts descending (write --sort=-COL)")
    parser.add_argument("--where", action="append", default=[], metavar="COL OP VALUE",
                        help="keep rows where e.g. allocator_label=orca-max, request_rate>=2 (repeatable)")
    parser.add_argument("--sweep", help="only runs of this sweep directory (results/runs/<experiment>/<sweep>)")
    parser.add_argument("--format", choices=FORMATS, default=None, help="table (default), csv or markdown")
    parser.add_argument("--reindex", action="store_true",
                        help="rebuild the index from the finished run dirs under runs/ next to it, then exit")
    parser.add_argument("--clean", action="store_true",
                        help="remove the unfinished run dirs kvbench made whose process is dead, then exit")
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2
    index = Path(args.index)
    try:
        check_modes(args)
        if args.output is not None:
            check_target(args.output, force=args.force, flag="--output")
    except (QueryError, OutputError) as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2
    args.format = args.format if args.export else (args.format or "table")
    try:
        check_index_path(index, must_exist=False)
        if args.reindex or args.clean:
            return _maintain(index, args.clean, args.reindex)
        check_index_path(index, must_exist=not (index.parent / "runs").is_dir())
    except ResultsError as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2

    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    group_by = [c.strip() for c in args.group_by.split(",") if c.strip()]
    if not columns:
        print(f"kvbench-results: --columns: {args.columns!r} names no column", file=sys.stderr)
        return 2
    try:
        df = with_granularity(with_labels(load_index(index)))
    except FileNotFoundError:
        print(f"kvbench-results: no index at {args.index}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"kvbench-results: cannot read {args.index}: {exc}", file=sys.stderr)
        return 2
    except IndexLineError as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2
    if args.experiment is not None:
        df = df[df["experiment"] == args.experiment]
    try:
        df = select(df, args.where)
        if args.sweep:
            df = in_sweep(df, Path(args.index), Path(args.sweep))
            check_sweep_dir(Path(args.index), Path(args.sweep), df)
        sort_keys = [k.strip() for k in args.sort.split(",") if k.strip()]
        note_all_null_sort(df, sort_keys)
        if args.compare or args.export:
            return compare_or_export(args, sort(df, sort_keys))
        # --sort orders the rows (groups keep their first appearance); else rows go by group
        hidden = hidden_settings(df, [*group_by, *columns])
        if hidden and args.columns == ",".join(DEFAULT_COMPARE_COLUMNS):
            columns = [*columns, *hidden]
        elif hidden:
            print(f"kvbench-results: rows that look alike differ in {', '.join(hidden)} (not shown; "
                  "add them to --columns)", file=sys.stderr)
        if sort_keys:
            table = compare(sort(df, sort_keys), [*group_by, *columns], by=())
        else:
            table = compare(df, columns, by=group_by)
    except (QueryError, GroupingError) as e:
        print(f"kvbench-results: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        known = ", ".join(df.columns)
        print(f"kvbench-results: --columns/--group-by: {e.args[0]} (known: {known})", file=sys.stderr)
        return 2
    if table.empty:
        where = f" for experiment {args.experiment!r}" if args.experiment is not None else ""
        print(f"kvbench-results: no runs in {args.index}{where}", file=sys.stderr)
        return 1

    if args.format == "csv":
        table.to_csv(sys.stdout, index=False)
        return 0
    blocks = []
    for name, group in _groups(table, group_by):
        if args.format == "markdown":
            blocks.append(f"### {name}\n\n{_markdown(group)}")
        else:
            cells = group.map(lambda v: _format_cell(v) or "-")
            blocks.append(f"== {name} ==\n{cells.to_string(index=False)}")
    print("\n\n".join(blocks))
    return 0


def hidden_settings(df: pd.DataFrame, shown: Sequence[str]) -> list[str]:
    """Settings not shown that tell apart rows alike in every shown setting (one row per run, never
    averaged; such rows would look like repeats of one config): added to the table's columns."""
    known = [c for c in shown if c in df.columns and is_setting(c)]
    found: dict[str, None] = {}
    for part in split(df, known):
        found.update((c, None) for c in settings_that_vary(part, ignore=[*shown, "granularity", "allocator"]))
    given = [c for c in (*known, "granularity", "allocator") if c in df.columns]
    return distinct_settings(df, list(found), given=given)


def _maintain(index: Path, clean_dirs: bool, rebuild: bool) -> int:
    """``--clean`` and ``--reindex``: one line on stdout each, or one on stderr and exit 2."""
    try:
        if clean_dirs:
            removed = clean(index)
            left = len(run_dirs(index.parent / "runs")[1])
            print(f"kvbench-results: removed {len(removed)} dead run dirs that kvbench made; {left} unfinished "
                  "left (a live run, or not provably kvbench's and dead)")
        if rebuild:
            done = reindex(index)
            notes = [f"{done.kept} kept from outside runs/" if done.kept else "",
                     f"{done.missing} kept whose run dir is gone (remove those lines by hand if the runs "
                     "are)" if done.missing else "",
                     f"{len(done.unreadable)} unreadable summary.json ({done.unreadable[0]})" if done.unreadable else ""]
            extra = "".join(f"; {n}" for n in notes if n)
            print(f"kvbench-results: {index}: {done.rows} finished runs{extra}; {done.unfinished} unfinished run "
                  "dirs ignored (--clean removes the dead ones)")
    except ResultsError as exc:
        print(f"kvbench-results: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvbench-results: cannot rewrite {index}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
