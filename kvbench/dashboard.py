"""``kvbench-dashboard``: a W&B workspace that compares allocators side by side.

Building the workspace is pure construction (no account, no network): by default the command
prints its sections and panels, ``--json`` prints the workspace spec the API would receive, and
only ``--save`` talks to W&B (it needs an entity, a login and a network).

The panels read what ``kvbench.loggers.wandb_logger`` writes: summary columns
(``mem_*_frac``, ``mean_batch_size``, ...), ``steps/<metric>`` history against ``step``,
``by_rate/*`` history against ``by_rate/request_rate``, and the top-level config key
``allocator_label`` that runs are grouped by (the allocator's config name, so Orca Max, Pow2
and Oracle are three bars, not one ``buddy``).
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Sequence

from kvbench.cli import OneLineParser, fail
from kvbench.loggers.base import RATE_PREFIX, STEP_METRIC, STEP_PREFIX
from kvbench.results.store import MEM_COLUMNS

GROUP_KEY = "allocator_label"  # config key: the allocator's config name (orca-max, paged, ...)
DEFAULT_NAME = "kvbench: allocators side by side"
STEP_SERIES = ("batch_size",)  # per-step series besides the memory fractions


def _label(column: str) -> str:
    return column.removeprefix("mem_").removesuffix("_frac") + " fraction"


def build_workspace(entity: str, project: str = "kvbench", name: str = DEFAULT_NAME):
    """The comparison workspace (``wandb_workspaces.workspaces.Workspace``), not saved."""
    with warnings.catch_warnings():  # its pydantic v1-style validators warn on import
        warnings.simplefilter("ignore", DeprecationWarning)
        import wandb_workspaces.reports.v2 as wr  # optional dependency: wandb-workspaces, only to build one
        import wandb_workspaces.workspaces as ws

    by_allocator = wr.Config(GROUP_KEY)

    def bar(column: str, title: str):
        return wr.BarPlot(
            title=title,
            metrics=[wr.SummaryMetric(column)],
            groupby=by_allocator,
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
            orientation="v",
        )

    def vs_rate(column: str, title: str):
        return wr.LinePlot(
            title=title,
            x=RATE_PREFIX + "request_rate",
            y=[RATE_PREFIX + column],
            groupby=by_allocator,
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
            title_x="request rate (req/s)",
        )

    def over_steps(column: str, title: str):
        return wr.LinePlot(
            title=title,
            x=STEP_METRIC,
            y=[STEP_PREFIX + column],
            groupby=by_allocator,
            groupby_aggfunc="mean",
            groupby_rangefunc="minmax",
            title_x="engine step",
        )

    memory = ws.Section(
        name="Memory breakdown (time-weighted run means)",
        is_open=True,
        panels=[bar(c, _label(c)) for c in MEM_COLUMNS],
    )
    serving = ws.Section(
        name="Batching, throughput, latency",
        is_open=True,
        panels=[
            bar("mean_batch_size", "mean batch size"),
            bar("request_throughput", "request throughput (req/s)"),
            bar("normalized_latency_s", "normalized latency (s/token)"),
            bar("mean_ttft_ms", "mean TTFT (ms)"),
            bar("p99_itl_ms", "p99 ITL (ms): preemption stalls"),
            bar("request_goodput", "request goodput (req/s within SLOs)"),
            vs_rate("p99_itl_ms", "p99 ITL vs request rate"),
            vs_rate("normalized_latency_s", "normalized latency vs request rate"),
            vs_rate("request_throughput", "request throughput vs request rate"),
            wr.ScatterPlot(
                title="normalized latency vs request rate (one point per run)",
                x=wr.SummaryMetric("request_rate"),
                y=wr.SummaryMetric("normalized_latency_s"),
            ),
        ],
    )
    per_step = ws.Section(
        name="Per engine step",
        is_open=True,
        panels=[over_steps(c, f"{_label(c)} per step") for c in MEM_COLUMNS]
        + [over_steps(c, c.replace("_", " ") + " per step") for c in STEP_SERIES],
    )
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=[memory, serving, per_step],
        runset_settings=ws.RunsetSettings(
            groupby=[ws.Config("experiment"), ws.Config(GROUP_KEY)],  # studies never merge
            pinned_columns=[
                f"config:{GROUP_KEY}",
                "config:experiment",
                "config:block_size",
                "config:workload",
                "config:request_rate",
                "summary:request_throughput",
                "summary:normalized_latency_s",
                "summary:mean_batch_size",
            ],
        ),
    )


def describe(workspace) -> list[dict]:
    """One dict per panel: section, panel type, title, x and metrics (for printing and tests)."""
    rows = []
    for section in workspace.sections:
        for panel in section.panels:
            metrics = getattr(panel, "metrics", None) or getattr(panel, "y", None) or []
            if not isinstance(metrics, list):  # a scatter plot's single y
                metrics = [metrics]
            rows.append(
                {
                    "section": section.name,
                    "type": type(panel).__name__,
                    "title": panel.title,
                    "x": _metric_name(getattr(panel, "x", None)),
                    "metrics": [_metric_name(m) for m in metrics],
                    "groupby": _metric_name(getattr(panel, "groupby", None)),
                }
            )
    return rows


def _metric_name(metric) -> str | None:
    if metric is None or isinstance(metric, str):
        return metric
    return f"{type(metric).__name__}({metric.name})"


def spec_json(workspace) -> str:
    """The workspace as the JSON the W&B API would receive."""
    model = workspace._to_model()  # wandb_workspaces' own serialization; no network
    return json.dumps(json.loads(model.model_dump_json(by_alias=True, exclude_none=True)), indent=1)


def main(argv: Sequence[str] | None = None) -> int:
    """``kvbench-dashboard``: print (default) or save the allocator comparison workspace."""
    parser = OneLineParser(
        prog="kvbench-dashboard",
        description="Build a W&B workspace comparing allocators. Prints it unless --save.",
    )
    parser.add_argument("--entity", default=os.environ.get("WANDB_ENTITY"), help="W&B entity")
    parser.add_argument("--project", default="kvbench", help="W&B project (%(default)s)")
    parser.add_argument("--name", default=DEFAULT_NAME, help="workspace name")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the workspace spec as JSON")
    out.add_argument("--save", action="store_true", help="save it to W&B (needs login, network)")
    args = parser.parse_args(argv)

    if args.save and not (args.entity or "").strip():
        return fail("kvbench-dashboard", "--save needs --entity (or WANDB_ENTITY)")
    for flag, value in (("--entity", args.entity), ("--project", args.project), ("--name", args.name)):
        if value is not None and not value.strip():
            return fail("kvbench-dashboard", f"{flag} must not be empty")
    try:
        workspace = build_workspace(args.entity or "ENTITY", args.project, args.name)
        if args.save:
            workspace.save()
    except Exception as exc:  # wandb and its HTTP client raise many types; the user needs one line
        text = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        return fail("kvbench-dashboard", f"could not {'save' if args.save else 'build'} the workspace for "
                    f"{args.entity}/{args.project} (needs `wandb login`, a network and an entity you belong "
                    f"to): {reason[:300]}", code=1)
    if args.save:
        print(workspace.url)
    elif args.json:
        print(spec_json(workspace))
    else:
        print(f"workspace {workspace.name!r} for {workspace.entity}/{workspace.project}")
        print(f"runs grouped by config.{GROUP_KEY}")
        section = None
        for row in describe(workspace):
            if row["section"] != section:
                section = row["section"]
                print(f"\n[{section}]")
            x = f" x={row['x']}" if row["x"] else ""
            print(f"  {row['type']:<11} {row['title']!r}{x} y={', '.join(row['metrics'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
