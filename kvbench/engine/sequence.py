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
    stopped: bool = False  # sampled a stop token (EOS with workload.ignore_eos=false): generates no more
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
    stopped_seqs: list[Seq] = field(default_factory=list)  # samples that stopped at EOS, blocks freed
    final_beams: list[tuple[float, list[int]]] = field(default_factory=list)  # (score, tokens) ended without K/V (beams; samples of one-token answers)
    # Derived once from the request (read on every step of the hot loop):
    request_id: int = field(init=False)
    output_len: int = field(init=False)
    is_beam: bool = field(init=False)
    kv_final_len: int = field(init=False)  # slots each sequence fills by its end: the last sampled token is never stored
    age_key: tuple[float, int] = field(init=False)  # (arrival, request id): the larger, the newer
    # Queueing (kvbench.engine.queue_orders, victims):
    order_s: float = field(init=False)  # its place in the queue order: arrival, or its return if it lost its place
    queued_since: float | None = field(init=False)  # when it last joined the waiting or swapped queue; None while running
    queue_wait_s: float = field(init=False)  # seconds spent queued, over all its stays
    lost_tokens: int = field(init=False)  # computed tokens discarded by its preemptions by recompute

    def __post_init__(self) -> None:
        request = self.request
        self.request_id = request.request_id
        self.output_len = request.output_len
        self.is_beam = request.beam_width > 1
        self.kv_final_len = request.prompt_len + request.output_len - 1
        self.age_key = (request.arrival_s, request.request_id)
        self.order_s = self.queued_since = request.arrival_s
        self.queue_wait_s = 0.0
        self.lost_tokens = 0

    @property
    def width(self) -> int:
        """How many sequences the group runs once forked."""
        return max(self.request.n, self.request.beam_width)

    def seq_finished(self, seq: Seq) -> bool:
        """The sequence generates no more: it reached the output length or sampled a stop token."""
        return seq.stopped or seq.num_generated >= self.output_len

    @property
    def generated_len(self) -> int:
        """Tokens of the longest sample (the output length unless samples stopped early)."""
        return max((s.num_generated for s in self.seqs + self.stopped_seqs), default=0)

    @property
    def generated_tokens(self) -> int:
        """Tokens generated over the returned samples (one beam for beam search)."""
        if self.is_beam:
            return self.generated_len
        extra = sum(len(t) - self.request.prompt_len for _, t in self.final_beams)
        return sum(s.num_generated for s in self.seqs + self.stopped_seqs) + extra

    @property
    def done(self) -> bool:
        if not self.forked:
            return False
        output_len = self.output_len
        for s in self.seqs:
            if not s.stopped and s.num_generated < output_len:
                return False
        return True
