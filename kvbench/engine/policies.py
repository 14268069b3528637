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
                  batch. Finished members stop costing compute (an optimistic reading of
                  padding-based servers).
"""
from __future__ import annotations

from kvbench.batch import StepBatch
from kvbench.engine.scheduler import Scheduler


class PromptFirstScheduler(Scheduler):
    """Prompt-only steps before decode steps (see module docstring)."""

    def schedule(self) -> StepBatch:
        if self.waiting and not self.swapped:
            running, self.running = self.running, []
            self._held_aside = sum(len(group.seqs) for group in running)
            try:
                batch = super().schedule()  # nothing running: only admissions of waiting prompts
            finally:
                admitted, self.running = self.running, running
                self._held_aside = 0
                for group in admitted:
                    self._insert_running(group)
            if batch.chunks or batch.copy_ops:
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
    """A new batch only when the running one has finished (see module docstring)."""

    def _admission_open(self) -> bool:
        return not self.running


SCHEDULERS: dict[str, type[Scheduler]] = {
    "mixed": Scheduler,
    "prompt_first": PromptFirstScheduler,
    "static": StaticBatchScheduler,
}


def scheduler_class(scheduling: str, batching: str = "continuous") -> type[Scheduler]:
    """The Scheduler subclass for a system's scheduling style and an engine batching mode."""
    if batching not in ("continuous", "static"):
        raise ValueError(f"engine.batching must be one of ['continuous', 'static'], got {batching!r}")
    if scheduling not in ("mixed", "prompt_first"):
        raise ValueError(f"system.scheduling must be one of ['mixed', 'prompt_first'], got {scheduling!r}")
    return SCHEDULERS["static" if batching == "static" else scheduling]
