"""``kvbench-sync``: find the offline W&B runs under results folders and upload them.

Offline runs live in each run directory (``<run dir>/wandb/offline-run-*``), so a plain
``wandb sync`` in the project root finds nothing. This command lists them (``--list``) or
hands them to ``wandb sync`` (which needs a login and a network; without them it fails and
this command says so in one line, exit 1). Already synced runs are skipped unless ``--all``.
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kvbench.cli import OneLineParser, finite_positive

SYNCED_SUFFIX = ".synced"  # wandb sync leaves run-<id>.wandb.synced next to an uploaded log


def find_offline_runs(roots: Sequence[str | Path], include_synced: bool = False) -> list[Path]:
    """Every ``offline-run-*`` directory below the roots, oldest first."""
    found = set()
    for root in map(Path, roots):
        for path in root.rglob("offline-run-*"):
            if not path.is_dir() or not any(path.glob("run-*.wandb")):
                continue
            if not include_synced and any(path.glob(f"run-*.wandb{SYNCED_SUFFIX}")):
                continue
            found.add(path)
    return sorted(found, key=lambda p: (p.name, str(p)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="kvbench-sync", description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["results"], help="folders to search (results)")
    parser.add_argument("--list", action="store_true", help="only print the runs found")
    parser.add_argument("--all", action="store_true", help="include runs already synced")
    parser.add_argument("--project", help="W&B project to upload to (default: the run's own)")
    parser.add_argument("--entity", help="W&B entity to upload to")
    parser.add_argument("--timeout", type=finite_positive, default=300.0, help="seconds to wait for wandb sync")
    args = parser.parse_args(argv)

    missing = [r for r in args.roots if not Path(r).is_dir()]
    if missing:
        print(f"kvbench-sync: error: no folder {missing[0]}", file=sys.stderr)
        return 2
    for name, value in (("--project", args.project), ("--entity", args.entity)):
        if value is not None and not value.strip():
            print(f"kvbench-sync: error: {name} must not be empty", file=sys.stderr)
            return 2
    runs = find_offline_runs(args.roots, include_synced=args.all)
    if not runs:
        print(f"kvbench-sync: no offline W&B runs to sync under {', '.join(args.roots)}", file=sys.stderr)
        return 1
    if args.list:
        print("\n".join(str(p) for p in runs))
        return 0
    cmd = [sys.executable, "-m", "wandb", "sync", "--yes", *(["--include-synced"] if args.all else [])]
    cmd += [f"--project={args.project}"] if args.project else []
    cmd += [f"--entity={args.entity}"] if args.entity else []
    print(f"kvbench-sync: syncing {len(runs)} run(s)", file=sys.stderr)
    try:
        proc = subprocess.run([*cmd, *map(str, runs)], capture_output=True, text=True, timeout=args.timeout)
    except OSError as exc:
        print(f"kvbench-sync: error: cannot start wandb sync: {exc}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        print(f"kvbench-sync: wandb sync gave no answer in {args.timeout:g} s (no network?)", file=sys.stderr)
        return 1
    if proc.returncode != 0 or "error" in proc.stderr.lower():
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
        print(f"kvbench-sync: wandb sync failed (needs `wandb login` and a network): {reason}", file=sys.stderr)
        return 1
    print(proc.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
