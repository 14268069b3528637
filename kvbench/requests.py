"""What a workload hands the engine: requests with their prompts, lengths and arrival times."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Request:
    """One client request. The engine generates exactly ``output_len`` tokens (EOS ignored)."""

    request_id: int
    prompt_ids: list[int]
    output_len: int
    arrival_s: float = 0.0
    n: int = 1  # parallel samples
    beam_width: int = 1  # beam search width (1 = no beam search)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def final_len(self) -> int:
        """Tokens one sequence of this request holds when it finishes."""
        return len(self.prompt_ids) + self.output_len
