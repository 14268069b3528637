"""Runtime state of requests inside the engine: groups of sequences (samples or beams)."""
from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field

from kvbench.requests import Request


class GroupStatus(enum.Enum):
    WAITING = "waiting"  # not admitted yet, or preempted by recompute
    RUNNING = "running"
    SWAPPED = "swapped"  # preempted by swap; K/V in the host pool
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(slots=True, eq=False)
class Seq:
    """One sequence: the request's prompt plus the tokens it has generated."""

    seq_id: int
    tokens: list[int]
    num_computed: int = 0  # tokens whose K/V are in the pool
    num_generated: int = 0
    sample_index: int = 0
    cum_logprob: float = 0.0  # beam search score
    token_times: array = field(default_factory=lambda: array("d"))  # when each generated token was emitted (s)

    def fork_times(self) -> array:
        """A forked child's emission times: its tokens so far were sampled with the parent's."""
        return array("d", self.token_times)

    @property
    def pending(self) -> int:
        """Tokens known but not yet computed (prompt left to prefill, or the last sampled token)."""
        return len(self.tokens) - self.num_computed


@dataclass(slots=True, eq=False)
class Group:
    """A request and its live sequences; scheduled, preempted and finished all or nothing."""

    request: Request
    seqs: list[Seq]
    status: GroupStatus = GroupStatus.WAITING
    forked: bool = False  # parallel samples / beams created (after the prompt's prefill)
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0
    alone_oom_at: int | None = None  # tokens generated when it last ran out of memory alone in the pool
    exclusive: bool = False  # comes back with the pool to itself (after running out of memory alone)
    reject_reason: str = ""
    best_tokens: list[int] = field(default_factory=list)
    final_beams: list[tuple[float, list[int]]] = field(default_factory=list)  # (score, tokens) ended without K/V (beams; samples of one-token answers)

    @property
    def request_id(self) -> int:
        return self.request.request_id

    @property
    def width(self) -> int:
        """How many sequences the group runs once forked."""
        return max(self.request.n, self.request.beam_width)

    @property
    def kv_final_len(self) -> int:
        """Slots each sequence fills by its end: the last sampled token is never stored."""
        return self.request.prompt_len + self.request.output_len - 1

    @property
    def is_beam(self) -> bool:
        return self.request.beam_width > 1

    @property
    def done(self) -> bool:
        return self.forked and all(s.num_generated >= self.request.output_len for s in self.seqs)
