"""Op-for-op differential check of a kvbench strategy against an engine's own KV manager.

``record(cfg)`` runs one kvbench job with its allocator wrapped in an ``OpRecorder`` and returns
the stream of seam calls the engine made (admit, grow, grow_many, fork, free, commit, usage) with what
each answered. ``replay(ops, peer)`` makes the same calls on another allocator and lists every
op whose answer differs. Answers are compared in block-id-free terms (fit and cached tokens,
grown or out of memory, forked or not, the memory breakdown), since the two pools number their
blocks differently. A replay stops at the first op whose outcome changes what the engine would
do next (an admission, a grow or a fork answered differently): past it the streams diverge.

    python -m kvbench.peers.diff allocator=paged_prefix --peer vllm-v1 workload=shared_prefix
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field

from hydra import compose, initialize_config_dir

import kvbench.run.prepare as app  # build_allocator is looked up there, run(cfg) prepares through it
from allocators import Allocator, AllocatorError, MemoryUsage
from kvbench.config.errors import CONF_DIR
from kvbench.peers import build_peer
from kvbench.run.lifecycle import run

# ops whose differing answer changes the engine's next decisions
DECISIONS = ("admit", "grow", "grow_many", "fork")


@dataclass(slots=True)
class Op:
    name: str
    args: tuple
    answer: object


def _answer(name: str, result) -> object:
    if name == "admit":
        return (result.fit.value, result.num_cached_tokens)
    if name == "grow":
        return None if result is None else len(result)
    if name == "grow_many":  # the engine's bulk decode grow: how many of the sequences grew
        return len(result)
    if name == "usage":
        return (result.token, result.reserved, result.internal, result.external, result.cached)
    if name == "take_copy_ops":
        return sum(op.length for op in result)
    return result


def _frozen(name: str, arg):
    """A copy of a call's argument as it was (the engine reuses its lists)."""
    if name == "usage":
        return dict(arg)
    if name == "grow_many":
        return [(seq_id, list(ids)) for seq_id, ids in arg]
    return list(arg) if isinstance(arg, list) else arg


class OpRecorder:
    """Forwards every call to ``inner`` and logs the seam calls with their answers."""

    LOGGED = ("admit", "grow", "grow_many", "fork", "free", "note_preempted", "commit", "usage", "take_copy_ops")

    def __init__(self, inner: Allocator) -> None:
        self.inner = inner
        self.ops: list[Op] = []

    def __getattr__(self, name: str):
        target = getattr(self.inner, name)
        if name not in self.LOGGED:
            return target

        def logged(*args, **kwargs):
            result = target(*args, **kwargs)
            frozen = tuple(_frozen(name, a) for a in args)
            self.ops.append(Op(name, frozen + tuple(kwargs.values()), _answer(name, result)))
            return result

        return logged


@dataclass
class Report:
    ops: int
    replayed: int
    differences: list[tuple[int, str, object, object]] = field(default_factory=list)
    diverged_at: int | None = None  # index of the first differing decision, if any

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, name, _, _ in self.differences:
            out[name] = out.get(name, 0) + 1
        return out


def usage_fields_differing(a: tuple, b: tuple) -> list[str]:
    names = ("token", "reserved", "internal", "external", "cached")
    return [n for n, x, y in zip(names, a, b) if x != y]


def replay(ops: list[Op], peer: Allocator) -> Report:
    """The same calls on ``peer``; every differing answer, up to the first differing decision."""
    report = Report(len(ops), 0)
    for index, op in enumerate(ops):
        answer = _answer(op.name, getattr(peer, op.name)(*op.args))
        report.replayed += 1
        if answer != op.answer:
            report.differences.append((index, op.name, op.answer, answer))
            if op.name in DECISIONS:
                report.diverged_at = index
                break
    return report


def record(overrides: list[str]) -> tuple[list[Op], dict]:
    """Run one kvbench job (sim, logger off, nothing kept) and return its op stream and summary."""
    recorders: list[OpRecorder] = []
    original = app.build_allocator

    def wrapped(*args, **kwargs):
        recorder = OpRecorder(original(*args, **kwargs))
        recorders.append(recorder)
        return recorder

    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "logger=none", "progress=false",
                                                       f"results_dir={tmp}"])
        app.build_allocator = wrapped
        try:
            summary = run(cfg)
        finally:
            app.build_allocator = original
    return recorders[-1].ops, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvbench.peers.diff", description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", default="vllm-v1", help="the peer allocator's config name")
    parser.add_argument("--peer-knob", action="append", default=[], metavar="K=V",
                        help="a knob of the peer (default for vllm-v1: cache_at=commit, kvbench's hashing moment)")
    parser.add_argument("overrides", nargs="*", help="kvbench overrides of the recorded run (sim backend)")
    args = parser.parse_args(argv)
    try:
        ops, summary = record(args.overrides)
        inner = summary
        knobs = dict(kv.split("=", 1) for kv in args.peer_knob) or {"cache_at": "commit"}
        block_size = int(inner["block_size"])
        peer = build_peer(args.peer, int(inner["kv_slots"]), block_size=block_size, **knobs)
    except AllocatorError as exc:
        print(f"kvbench.peers.diff: {exc}", file=sys.stderr)
        return 2
    report = replay(ops, peer)
    print(f"{report.replayed} of {report.ops} ops replayed; {len(report.differences)} differ {report.kinds()}")
    for index, name, ours, theirs in report.differences[:10]:
        print(f"  op {index} {name}: kvbench {ours} / {args.peer} {theirs}")
    return 0 if report.diverged_at is None else 1


if __name__ == "__main__":
    sys.exit(main())
