"""``make bench``: a regression gate, the current tree against a reference commit, side by side.

``tests/benchmarks/baseline.json`` names a reference commit ``ref`` and, per measurement, the
expected ratio of CPU time current / ref (1.0 when the baseline was written at ref itself).
The gate checks ref out into a temporary ``git worktree`` (removed afterwards, on Ctrl-C too)
and runs ``PAIRS`` pairs of fresh processes, one process per tree. Each is this file (the
current tree's measuring code) run with cwd and ``PYTHONPATH`` at its tree, so that it imports
``kvbench``, ``allocators``, ``kernels`` and the workload helpers of ``tests/benchmarks`` from
that tree (it checks each one's ``__file__`` and fails otherwise). The two processes of a pair
are set up at once, then measured in lockstep: a chunk of rounds on one, the same chunk on
the other, the order alternating, so that a change of load touches both sides alike (run one
after the other, the ratio of a pair swung from 0.6 to 1.5 on this machine while another job
came and went). A round times each measurement of a group once: CPU time
(``time.process_time``), ``gc.collect()`` before and the collector off during the call, torch
on one thread. Per pair and measurement the ratio current / ref is the median over rounds of
round k against round k (the same work); the gate takes the median over the pairs, which
averages out what one process alone cannot (hash seed, shared by both sides of a pair and
different across pairs, memory layout, collector state), and fails when it exceeds the
expected ratio by more than ``TOLERANCE``.

Groups (one per suite):

- ``allocator``: one steady-state step of each strategy (256 running sequences, the
  ``test_bench_allocators`` stream);
- ``sim``: one fixed simulated run of the engine (``test_bench_engine.SimRun``: 64 requests
  in plain decode, about 6K sequence-steps) per allocator in ``SIM_GATE_ALLOCATORS``;
- ``kernel``: the torch paged attention the engine calls on the CPU, one mixed step.

A change to a helper's workload reads as a change of its measurement: rewrite the baseline
with ``make bench-update`` (ref := HEAD, every expected ratio 1.0) after an intended one.
A reference commit missing from the repository (a shallow clone) exits 2 with one line.

Measured on the shared 2-core development machine: one ``make bench`` takes 70-100 s (up to
5 min under the load below). Ten runs of the unchanged tree while two busy loops held both
cores (load average 4-7, another engineer's jobs too): all passed; worst change per group
allocator +3.6%, sim +16.1% (one run; the others at most +9.7%), kernel +9.5%; lowest -5.0%,
-5.9%, -8.2%. An injected 30% slowdown (``paged-16:1.3 sim-paged:1.3``) failed all three
runs: paged-16 +27.6%, +29.5%, +29.1%; sim-paged +30.6%, +29.1%, +25.9%. Hence ``TOLERANCE``
stays 20%. (The same-process ratio gate this replaces read up to +31% on the unchanged tree.)

``KVBENCH_BENCH_SLOWDOWN="paged-16:1.3"`` (test-only) makes the named measurement that many
times slower on the current tree's side by spinning after it for a proportional CPU time, to
prove the gate catches it.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BASELINE = HERE / "baseline.json"
TOLERANCE = 0.20
PAIRS = 8
ROUNDS = {"allocator": 100, "sim": 5, "kernel": 30}  # per process
CHUNK = {"allocator": 10, "sim": 1, "kernel": 5}  # rounds on one side before the other's turn
# What the measurements run; a HEAD with uncommitted changes here is not what --update would name.
WATCHED = ("kvbench", "allocators", "kernels", "tests/benchmarks")
SLOWDOWN_ENV = "KVBENCH_BENCH_SLOWDOWN"


# ---- the child: absolute CPU times of the tree on PYTHONPATH ------------------------------

def _slowdowns() -> dict[str, float]:
    spec = os.environ.get(SLOWDOWN_ENV, "")
    out = {}
    for item in spec.replace(",", " ").split():
        name, _, factor = item.partition(":")
        out[name] = float(factor)
    return out


def _timed(fn: Callable[[], object], factor: float = 1.0) -> float:
    """CPU time of this process spent in ``fn`` (waiting for a busy shared core is not counted),
    collected before and with the collector off during the call."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        fn()
        elapsed = time.process_time() - t0
        if factor != 1.0:  # injected regression: spin for the extra CPU time the work would take
            end = time.process_time() + elapsed * (factor - 1.0)
            while time.process_time() < end:
                pass
            elapsed = time.process_time() - t0
    finally:
        gc.enable()
    return elapsed


def _check_tree(tree: Path) -> None:
    """Fail loudly unless the code under test and the helpers come from ``tree``."""
    import allocators
    import kernels
    import kvbench
    from tests.benchmarks import test_bench_allocators, test_bench_engine, test_bench_kernels

    tree = tree.resolve()
    for mod in (kvbench, allocators, kernels, test_bench_allocators, test_bench_engine, test_bench_kernels):
        path = Path(mod.__file__).resolve()
        if not path.is_relative_to(tree):
            raise SystemExit(f"{mod.__name__} was imported from {path}, not from the tree "
                             f"under test {tree} (sys.path: {sys.path[:3]})")


def _allocator_setup() -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    from tests.benchmarks.test_bench_allocators import STRATEGIES, steady

    streams = {p.id: steady(*p.values) for p in STRATEGIES}
    return {name: (s.prepare, s.step) for name, s in streams.items()}


def _sim_setup() -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    from tests.benchmarks.test_bench_engine import SIM_GATE_ALLOCATORS, SimRun

    runs = {f"sim-{name}": SimRun(name) for name in SIM_GATE_ALLOCATORS}
    return {name: (sim.prepare, sim.run) for name, sim in runs.items()}


def _kernel_setup() -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    import torch

    import kernels
    from tests.benchmarks.test_bench_kernels import _mixed_step

    batch = _mixed_step("cpu")
    paged = kernels.get_ops("torch").paged_attention
    out = torch.empty_like(batch[0])

    def step() -> None:
        paged(*batch, 0.125, out=out)

    for _ in range(3):
        step()
    return {"paged-attention": (lambda: None, step)}


def setups() -> dict[str, dict[str, tuple[Callable[[], None], Callable[[], None]]]]:
    """Per group, per measurement: (untimed preparation, timed call)."""
    import torch

    torch.set_num_threads(1)
    out = {"allocator": _allocator_setup(), "sim": _sim_setup(), "kernel": _kernel_setup()}
    gc.collect()
    gc.freeze()  # the setup's objects: out of every later collection, which stays cheap
    return out


def run_rounds(fns: dict[str, tuple[Callable[[], None], Callable[[], None]]], rounds: int,
               slow: dict[str, float]) -> list[dict[str, float]]:
    """CPU time (s) of each measurement of a group, per round; a round runs each once."""
    out = []
    for _ in range(rounds):
        times = {}
        for name, (prepare, fn) in fns.items():
            prepare()
            times[name] = _timed(fn, slow.get(name, 1.0))
            gc.freeze()  # what survived: out of the next collection, which then costs little
        out.append(times)
    return out


def child_main(tree: Path) -> int:
    """Set up, say which measurements there are, then run rounds on request ("<group> <n>" on
    stdin, one JSON list of rounds back per request) until stdin closes."""
    # Run as a script, Python put this file's folder first on sys.path; the tree under test
    # (PYTHONPATH, cwd) must be the only place the code comes from.
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != HERE]
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the code under test prints goes to stderr, not into the replies
    _check_tree(tree)
    groups = setups()
    slow = _slowdowns()
    reply.write(json.dumps({group: list(fns) for group, fns in groups.items()}) + "\n")
    for line in sys.stdin:
        group, rounds = line.split()
        reply.write(json.dumps(run_rounds(groups[group], int(rounds), slow)) + "\n")
    return 0


# ---- the parent: A/B pairs against the reference worktree ---------------------------------

class GateError(Exception):
    """Setup failed (no baseline, no reference commit, a child died): exit 2 with one line."""


def _git(*args: str, root: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and proc.returncode:
        raise GateError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def resolve_ref(ref: str, root: Path = ROOT) -> str:
    """The full commit id of ``ref``; GateError when the repository does not hold it."""
    proc = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", root=root, check=False)
    if proc.returncode:
        raise GateError(f"reference commit {ref} is not in this repository (a shallow clone? "
                        f"fetch it, or make bench-update to measure against HEAD)")
    return proc.stdout.strip()


def dirty_paths(root: Path = ROOT) -> list[str]:
    """Tracked files with uncommitted changes under ``WATCHED`` (the baseline itself excepted)."""
    proc = _git("status", "--porcelain", "--untracked-files=no", "--", *WATCHED,
                ":(exclude)tests/benchmarks/baseline.json", root=root)
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def measurement_names() -> dict[str, list[str]]:
    """The measurements of the current tree (without measuring)."""
    from tests.benchmarks.test_bench_allocators import STRATEGIES
    from tests.benchmarks.test_bench_engine import SIM_GATE_ALLOCATORS

    return {"allocator": [p.id for p in STRATEGIES],
            "sim": [f"sim-{name}" for name in SIM_GATE_ALLOCATORS],
            "kernel": ["paged-attention"]}


class Child:
    """A measuring process on one tree (this file, ``--child``), driven over stdin/stdout."""

    def __init__(self, tree: Path, *, current: bool, seed: int) -> None:
        self.side = "current" if current else "reference"
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED=str(seed), OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        if not current:
            env.pop(SLOWDOWN_ENV, None)
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "gate.py"), "--child", "--tree", str(tree)],
                                     cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, bufsize=1)

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.err.seek(0)
            tail = [x for x in self.err.read().splitlines() if x.strip()][-1:] or [f"exit {self.proc.returncode}"]
            raise GateError(f"the child on the {self.side} tree failed: {tail[0]}")
        return json.loads(line)

    def rounds(self, group: str, n: int) -> list[dict[str, float]]:
        try:
            self.proc.stdin.write(f"{group} {n}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # read() says why
        return self.read()

    def close(self, kill: bool = False) -> None:
        """Let the process finish (stdin closed), or kill it (on an error or Ctrl-C)."""
        if self.proc.poll() is None:
            try:
                if kill:
                    raise OSError
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


def round_ratios(current: list[dict[str, float]], reference: list[dict[str, float]]) -> dict[str, float | None]:
    """Per measurement, the median over rounds of current / reference, round k against round k
    (same work, nearly the same moment); None when the reference does not have it."""
    return {name: statistics.median(c[name] / r[name] for c, r in zip(current, reference))
            if name in reference[0] else None for name in current[0]}


def run_pair(ref_tree: Path, seed: int, scale: float, current_first: bool) -> dict[str, dict[str, float | None]]:
    """One fresh process per tree, set up at once, then measured in lockstep: a chunk of rounds
    on one, the same chunk on the other, the order alternating, so that a change of load
    touches both sides alike. Per measurement, the ratio current / reference."""
    cur, ref = Child(ROOT, current=True, seed=seed), Child(ref_tree, current=False, seed=seed)
    try:
        groups, _ = cur.read(), ref.read()
        out, k = {}, 0
        for group in groups:
            times: dict[str, list] = {"current": [], "reference": []}
            total = max(3, round(ROUNDS[group] * scale))
            for start in range(0, total, CHUNK[group]):
                n = min(CHUNK[group], total - start)
                for child in ((cur, ref) if (k % 2 == 0) == current_first else (ref, cur)):
                    times[child.side] += child.rounds(group, n)
                k += 1
            out[group] = round_ratios(times["current"], times["reference"])
    except BaseException:
        cur.close(kill=True)
        ref.close(kill=True)
        raise
    cur.close()
    ref.close()
    return out


def per_pair(pairs: list[dict[str, dict[str, float | None]]]) -> dict[str, dict[str, list[float]]]:
    """Per measurement, the ratios of the pairs that have it."""
    return {group: {name: [p[group][name] for p in pairs if p[group].get(name) is not None]
                    for name in names} for group, names in pairs[0].items()}


def medians(ratios: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float | None]]:
    return {group: {name: statistics.median(r) if r else None for name, r in names.items()}
            for group, names in ratios.items()}


def ab_measure(ref: str, pairs: int, scale: float, log=print) -> dict[str, dict[str, list[float]]]:
    """Check ``ref`` out into a temporary worktree, run the pairs, remove the worktree."""
    tmp = Path(tempfile.mkdtemp(prefix="kvbench-gate-"))
    added = False
    try:
        _git("worktree", "add", "--detach", "--quiet", str(tmp), ref)
        added = True
        results, t0 = [], time.perf_counter()
        for i in range(pairs):
            # both sides of a pair share a hash seed, pairs differ; who goes first alternates
            results.append(run_pair(tmp, seed=1 + i, scale=scale, current_first=i % 2 == 0))
            log(f"pair {i + 1}/{pairs} ({time.perf_counter() - t0:.0f} s)")
        return per_pair(results)
    finally:
        # only the worktree made here; --force: it may hold untracked files (__pycache__)
        if not (added and _git("worktree", "remove", "--force", str(tmp), check=False).returncode == 0):
            shutil.rmtree(tmp, ignore_errors=True)


def compare(measured: dict[str, dict[str, float | None]], expected: dict[str, dict[str, float]],
            tolerance: float = TOLERANCE) -> tuple[list[dict], bool]:
    """One row per measurement (group, name, expected, now, change, verdict); ok when none regressed.
    ``now`` is the ratio current / ref; a measurement without an expected ratio or without a
    ratio (not at the reference) is "new" and passes."""
    rows, ok = [], True
    for group, ratios in measured.items():
        for name, now in ratios.items():
            exp = expected.get(group, {}).get(name)
            change = now / exp - 1 if exp and now is not None else None
            verdict = "new" if change is None else ("REGRESSED" if change > tolerance else "ok")
            ok &= verdict != "REGRESSED"
            rows.append({"group": group, "name": name, "expected": exp, "now": now,
                         "change": change, "verdict": verdict})
    return rows, ok


def format_rows(rows: list[dict], tolerance: float = TOLERANCE) -> str:
    lines = [f"{'group':<10} {'measurement':<18} {'expected':>9} {'now':>9} {'change':>8}  verdict "
             f"(fails above +{tolerance:.0%})"]
    for r in rows:
        exp = "-" if r["expected"] is None else f"{r['expected']:.3f}"
        now = "-" if r["now"] is None else f"{r['now']:.3f}"
        change = "-" if r["change"] is None else f"{r['change']:+.1%}"
        lines.append(f"{r['group']:<10} {r['name']:<18} {exp:>9} {now:>9} {change:>8}  {r['verdict']}")
    return "\n".join(lines)


def update(baseline: Path) -> int:
    dirty = dirty_paths()
    if dirty:
        raise GateError(f"uncommitted changes under {', '.join(WATCHED)} ({', '.join(dirty[:3])}"
                        f"{', ...' if len(dirty) > 3 else ''}): commit them first, the baseline names HEAD")
    head = resolve_ref("HEAD")
    expected = {group: {name: 1.0 for name in names} for group, names in measurement_names().items()}
    baseline.write_text(json.dumps({"ref": head, "expected": expected}, indent=1, sort_keys=True) + "\n")
    print(f"baseline written: {baseline.name} (ref {head[:12]}, every expected ratio 1.0)")
    return 0


def _terminate(signum, frame):  # SIGTERM: unwind like Ctrl-C, so the worktree is removed
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="ref := HEAD, every expected ratio 1.0")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--ref", help="compare against this commit instead (expected ratios 1.0)")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="pairs of processes (current, ref)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the rounds per child")
    parser.add_argument("--verbose", action="store_true", help="print each pair's ratios")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.tree or Path.cwd())
    try:
        if args.update:
            return update(args.baseline)
        if args.ref:
            ref, expected = args.ref, {}
        elif args.baseline.is_file():
            base = json.loads(args.baseline.read_text())
            ref, expected = base["ref"], base["expected"]
        else:
            raise GateError(f"no baseline at {args.baseline}; run make bench-update")
        commit = resolve_ref(ref)
        if args.ref:
            expected = {g: dict.fromkeys(names, 1.0) for g, names in measurement_names().items()}
        print(f"make bench: current tree vs ref {commit[:12]}, {args.pairs} pairs of processes")
        signal.signal(signal.SIGTERM, _terminate)
        ratios = ab_measure(commit, args.pairs, args.scale)
    except GateError as e:
        print(f"make bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("make bench: interrupted (the reference worktree was removed)", file=sys.stderr)
        return 130
    if args.verbose:
        for group, names in ratios.items():
            for name, r in names.items():
                print(f"{group:<10} {name:<18} pairs: {' '.join(f'{x:.3f}' for x in r)}")
    rows, ok = compare(medians(ratios), expected)
    print(format_rows(rows))
    if not ok:
        print("make bench: regression (CPU time current / ref above the expected ratio by more "
              "than the tolerance)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
