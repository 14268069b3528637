"""How a preempted group comes back with its sharing intact: a fork tree over its sequences.

The samples or beams of a group share prefixes: the prompt, and the tokens two of them had in
common when one forked from the other. Re-admitting each sequence on its own would need memory
for every copy of those prefixes, so a group that fitted with sharing could no longer fit.
Instead one sequence (the root) is admitted with all its tokens and every other one forks from
an earlier one at the end of the prefix they share, as the group grew in the first place: the
shared prefix is computed (or swapped in) once.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.engine.sequence import Seq


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(slots=True)
class ForkTree:
    """``root`` is admitted; ``children[parent seq_id]`` forks from it, (fork point, child) in
    increasing fork point. A child's fork point is never before its parent's own fork point."""

    root: Seq
    children: dict[int, list[tuple[int, Seq]]] = field(default_factory=dict)


def plan_restore(seqs: list[Seq], limit: Callable[[Seq], int], can_parent: Callable[[Seq], bool]) -> ForkTree:
    """The fork tree of ``seqs`` (at least one may be a parent).

    ``limit(seq)`` caps every fork point that involves ``seq`` (how far it can be computed or swapped
    in before a fork). Parents come first, in token order (so each one's best partner comes before
    it); sequences that never compute again (``can_parent`` False: finished samples) come last and
    are leaves. Each sequence forks from the earlier one with which its capped common prefix is
    longest; a tie goes to the earlier one, which keeps fork points non-decreasing down the tree.
    """
    parents = sorted((s for s in seqs if can_parent(s)), key=lambda s: s.tokens)
    leaves = [s for s in seqs if not can_parent(s)]
    if not parents:
        raise ValueError("a group to restore needs a sequence that still computes")
    order = parents + leaves
    tree = ForkTree(order[0])
    caps = {s.seq_id: limit(s) for s in order}
    for i, seq in enumerate(order[1:], 1):
        best, best_at = order[0], -1
        for cand in order[:min(i, len(parents))]:
            at = min(common_prefix(cand.tokens, seq.tokens), caps[cand.seq_id], caps[seq.seq_id])
            if at > best_at:
                best, best_at = cand, at
        tree.children.setdefault(best.seq_id, []).append((best_at, seq))
    for kids in tree.children.values():
        kids.sort(key=lambda kid: kid[0])
    return tree
