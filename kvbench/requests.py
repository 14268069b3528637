"""What a workload hands the engine: requests with their prompts, lengths and arrival times."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FollowUp:
    """The next turn of a conversation: the engine releases it ``think_s`` after the previous
    turn finishes, its prompt being that turn's prompt + generated tokens + ``user_ids``."""

    request_id: int
    user_ids: list[int]
    output_len: int
    think_s: float
    next: FollowUp | None = None


@dataclass(slots=True)
class Request:
    """One client request. The engine generates ``output_len`` tokens per sample, fewer only where a
    sample samples a stop token (``workload.ignore_eos=false`` on hf)."""

    request_id: int
    prompt_ids: list[int]
    output_len: int
    arrival_s: float = 0.0
    n: int = 1  # parallel samples
    beam_width: int = 1  # beam search width (1 = no beam search)
    follow_up: FollowUp | None = None  # the conversation's next turn (multi-turn chat)
    priority: int | None = None  # scheduling class (lower = more urgent); None: the workload gives none

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def final_len(self) -> int:
        """Tokens one sequence of this request holds when it finishes."""
        return len(self.prompt_ids) + self.output_len


def later_turns(request: Request) -> list[Request]:
    """The turns a rejected turn's conversation never released, for the books: each prompt is the
    history with the unknown replies as placeholder ids of their dataset length."""
    turns, history, follow = [], list(request.prompt_ids) + [0] * request.output_len, request.follow_up
    while follow is not None:
        history = history + list(follow.user_ids)
        turns.append(Request(follow.request_id, history, follow.output_len, request.arrival_s,
                             request.n, request.beam_width, priority=request.priority))
        history = history + [0] * follow.output_len
        follow = follow.next
    return turns

