"""Scheduling styles as Scheduler subclasses, chosen by config (``system.scheduling``,
``engine.batching``), never by flags inside the base scheduler.

    mixed         the base Scheduler: decodes, prefill chunks and admissions share a step
                  (vLLM with chunked prefill; Orca's iteration-level batching).
    prompt_first  paper-era vLLM (v0.1, 2023): a step runs either prompts only or decodes
                  only. Waiting prompts are admitted first; if any were, the step holds just
                  their prefills and the running sequences wait one step. Admission stops
                  when running plus new sequences would exceed ``max_num_seqs``, as vLLM 0.1's
                  scheduler did, so every running sequence fits in the next decode step.
    static        static batching (FasterTransformer, HF ``generate``): a batch is admitted
                  only when the previous one has entirely finished; nothing joins a running
                  batch. Its compute is that of a padded tensor batch: every prompt padded to
                  the batch's longest, every row (each sample of each request) decoded until
                  the longest output ends, finished rows included. Each step carries those
                  rows (``PaddedRows``) for the executor's cost; the memory books are the
                  allocator's as for every style.
    static_unpadded  the same admission, but only live tokens cost compute (the optimistic
                  reading kvbench used before; kept to show what padding contributes).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from kvbench.batch import StepBatch
from kvbench.engine.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class PaddedRows:
    """What a padded static batch computes in one step: ``rows`` rows of ``query_len`` tokens
    at positions from ``start_pos``, each sampled (the prompt step: the longest prompt from 0;
    decode step k: one token at the longest prompt + k - 1)."""

    rows: int
    query_len: int
    start_pos: int


@dataclass(slots=True)
class PaddedStepBatch(StepBatch):
    padding: PaddedRows | None = None


class PromptFirstScheduler(Scheduler):
    """Prompt-only steps before decode steps (see module docstring)."""

    def schedule(self) -> StepBatch:
        self.prompt_step = False
        if self.waiting and not self.swapped:
            running, self.running = self.running, []
            self._held_aside = sum([len(group.seqs) for group in running])
            try:
                batch = super().schedule()  # nothing running: only admissions of waiting prompts
            finally:
                admitted, self.running = self.running, running
                self._held_aside = 0
                for group in admitted:
                    self._insert_running(group)
            if batch.chunks or batch.copy_ops:
                self.prompt_step = True
                return batch
        return self._decode_step()

    def _seq_limit(self) -> int:
        return self.cfg.max_num_seqs - getattr(self, "_held_aside", 0)

    def _decode_step(self) -> StepBatch:
        self._admission_closed = True
        try:
            return super().schedule()
        finally:
            self._admission_closed = False

    def _admission_open(self) -> bool:
        return not getattr(self, "_admission_closed", False)


class StaticBatchScheduler(Scheduler):
    """A new batch only when the running one has finished; padded compute (see module docstring)."""

    _rows = 0  # rows of the running static batch (samples or beams of each request)
    _longest_prompt = 0
    _decode_steps = 0

    def schedule(self) -> StepBatch:
        fresh = not self.running
        batch = super().schedule()
        if not batch.chunks:
            return batch
        if fresh:  # a new batch was admitted: its prompts, padded to the longest
            self._rows = sum(group.width for group in self.running)
            self._longest_prompt = max(group.request.prompt_len for group in self.running)
            self._decode_steps = 0
            rows = PaddedRows(self._rows, self._longest_prompt, 0)
        else:
            self._decode_steps += 1
            rows = PaddedRows(self._rows, 1, self._longest_prompt + self._decode_steps - 1)
        return PaddedStepBatch(**{f.name: getattr(batch, f.name) for f in fields(StepBatch)}, padding=rows)

    def _admission_open(self) -> bool:
        return not self.running


class StaticUnpaddedScheduler(Scheduler):
    """Static admission, live tokens only (see module docstring)."""

    def _admission_open(self) -> bool:
        return not self.running


SCHEDULERS: dict[str, type[Scheduler]] = {
    "mixed": Scheduler,
    "prompt_first": PromptFirstScheduler,
    "static": StaticBatchScheduler,
    "static_unpadded": StaticUnpaddedScheduler,
}
BATCHING = ("continuous", "static", "static_unpadded")


def scheduler_class(scheduling: str, batching: str = "continuous") -> type[Scheduler]:
    """The Scheduler subclass for a system's scheduling style and an engine batching mode."""
    if batching not in BATCHING:
        raise ValueError(f"engine.batching must be one of {list(BATCHING)}, got {batching!r}")
    if scheduling not in ("mixed", "prompt_first"):
        raise ValueError(f"system.scheduling must be one of ['mixed', 'prompt_first'], got {scheduling!r}")
    return SCHEDULERS[scheduling if batching == "continuous" else batching]
