"""The continuous-batching engine: scheduler + allocator + executor, one iteration at a time.

The clock is virtual: it advances by each step's duration (measured wall time for ``hf``,
modelled time for ``sim``) and jumps to the next arrival when the engine is idle.
"""
from __future__ import annotations

import bisect
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from allocators.base import Allocator
from kvbench.batch import StepBatch, StepResult
from kvbench.engine.concurrency import ConcurrencyGate
from kvbench.engine.decode_run import DecodeRuns
from kvbench.engine.policy_metrics import policy_summary
from kvbench.engine.recorder import Recorder, requests_frame, summarize
from kvbench.engine.scheduler import Scheduler, SchedulerConfig
from kvbench.engine.sequence import Group, GroupStatus, Seq
from kvbench.engine.swap_space import SwapSpace
from kvbench.requests import FollowUp, Request, later_turns


@dataclass
class EngineOutput:
    summary: dict  # the design's throughput/latency/batching/memory/outcome columns
    steps: pd.DataFrame
    requests: pd.DataFrame
    outputs: dict[int, list[list[int]]]  # request_id -> generated tokens of each sample (best beam first)
    swap_out_slots: int = 0
    swap_in_slots: int = 0
    memmap: dict | None = None  # pool snapshots: time_s [S], category [S, slots] int8, owner [S, slots] int32
    serving: dict | None = None  # vLLM's serving metrics at the default percentiles, no goodput SLO


class Engine:
    """Runs requests to completion; between two runs only the allocator should change."""

    def __init__(self, allocator: Allocator, executor, cfg: SchedulerConfig, *,
                 max_steps: int | None = None, progress: Callable[[int, float], None] | None = None,
                 memmap_every: int = 0, scheduler_cls: type[Scheduler] = Scheduler,
                 max_concurrency: int | None = None, load_cost=None, swap_space: SwapSpace | None = None,
                 tiers=None) -> None:
        self.allocator = allocator
        self.tiers = tiers  # allocators.tiers.TierStack: its books give each step's tier columns
        self.load_cost = load_cost  # kvbench.sim.offload.LoadCost: tier loads lengthen the step (sim)
        self.load_s = 0.0  # seconds tier loads added to the critical path
        self._swap_seen = (0, 0)  # the scheduler's swapped out and in slots at the last tier row
        self.tier_copies = getattr(executor, "host_tier", None) is not None  # hf with offload on
        self.memmap_every = memmap_every
        self._snapshots: list[tuple[float, object, object]] = []
        self.executor = executor
        self.cfg = cfg
        self.max_steps = max_steps
        self.progress = progress
        self._released: list[Request] = []
        self.max_concurrency = max_concurrency
        self.scheduler = scheduler_cls(cfg, allocator, need_block_tables=getattr(executor, "needs_block_tables", True),
                                       swap_space=swap_space)  # None: engine.swap_space_bytes' own pool
        self.decode_runs = DecodeRuns.for_engine(self)  # None: every step takes the general path

    def run(self, requests: list[Request]) -> EngineOutput:
        """Every request to completion. Python's cycle collector is off meanwhile (as it was
        after): the loop makes almost no reference cycles (a few hundred objects in a simulated
        hour), while each full collection rescans the growing step log and token lists, a fifth
        of a long simulation's time."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run(requests)
        finally:
            if collecting:
                gc.enable()

    def _run(self, requests: list[Request]) -> EngineOutput:
        sched = self.scheduler
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        groups: list[Group] = []
        recorder = Recorder()
        now = 0.0
        next_arrival = 0
        step = 0
        finished = 0
        gate = ConcurrencyGate(self.max_concurrency)
        counts_blocks = self.allocator.block_counts() is not None  # fixed by the allocator and model
        runs = self.decode_runs
        kept = None  # the run state held over a general step
        in_flight = lambda: len(sched.waiting) + len(sched.running) + len(sched.swapped)  # noqa: E731
        while next_arrival < len(pending) or sched.has_work():
            while (gate.has_room(in_flight(), now)  # first: the gate sees every step boundary
                   and next_arrival < len(pending) and pending[next_arrival].arrival_s <= now):
                group = self._new_group(gate.send(pending[next_arrival]))
                groups.append(group)
                sched.add(group)
                next_arrival += 1
            if not sched.has_work():
                if next_arrival < len(pending):
                    now = pending[next_arrival].arrival_s
                continue
            if runs is not None:
                steps_left = None if self.max_steps is None else self.max_steps - step - 1
                done, now, ended = runs.advance(now, pending[next_arrival].arrival_s if next_arrival < len(pending)
                                                else math.inf, step, recorder, finished, steps_left)
                if done:
                    step += done
                    finished += ended
                    self._queue_released(pending, next_arrival)
                    continue
                kept = runs.hold()  # the general step may change any running sequence
            t0 = time.perf_counter()
            sched.now = now
            batch = sched.schedule()
            running_requests = len(sched.running)  # during this step, prompt-only steps included
            if not batch.chunks and not batch.swap_out and not batch.swap_in:
                if not sched.has_work() or sched.preempted_now:  # all rejected, or retry after a preemption
                    continue
                if sched.running:
                    raise RuntimeError("scheduler made no progress with running sequences")
                if sched.swapped:  # its sequences come back unshared and no longer fit the empty pool
                    sched.reject_swapped_head("swapped-out group does not fit the empty KV pool")
                    continue
                if next_arrival < len(pending) and gate.has_room(in_flight(), now):  # waiting groups need memory that arrives later
                    now = max(now, pending[next_arrival].arrival_s)
                    continue
                sched.reject_head("does not fit in an empty KV pool")
                continue
            books = runs.prompt_step_books(kept) if kept is not None and sched.prompt_step else None
            if books is not None:  # the held sequences sat the step out: their sums hold
                logical, seq_blocks, usage = books
            else:
                final_lens, logical, seq_blocks = self._live_lens(counts_blocks)
                usage = self.allocator.usage(final_lens)
                if self.memmap_every and step % self.memmap_every == 0:
                    self._snapshot(now, final_lens)
            # the paper's Fig 15 moment: after scheduling, every beam and fork of the step held
            blocks = self._computed_blocks(seq_blocks)
            schedule_s = time.perf_counter() - t0
            if self.tier_copies:  # a backend with real K/V: the host tier's copies ride on the batch
                batch.tier_copies = self.allocator.take_tier_copies()
            result = self.executor.execute(batch)
            if self.load_cost is not None:
                self._add_load_time(result)
            self.allocator.commit()
            start = now
            now += result.duration_s
            t1 = time.perf_counter()
            finished += self._process(result, now)
            self._queue_released(pending, next_arrival)
            schedule_s += time.perf_counter() - t1
            recorder.step(index=step, start_s=start, batch=batch, result=result, usage=usage,
                          logical_slots=logical, blocks=blocks, num_running=len(sched.running),
                          num_waiting=len(sched.waiting), num_swapped=len(sched.swapped),
                          num_preemptions=sched.num_preemptions, schedule_s=schedule_s,
                          running_requests=running_requests,
                          tiers=self._tier_row() if self.tiers is not None else None)
            step += 1
            if kept is not None:
                runs.resume(kept)
                kept = None
            if self.progress is not None:
                self.progress(finished, now)  # requests done, simulated seconds
            if self.max_steps is not None and step >= self.max_steps:
                raise RuntimeError(f"engine did not finish within max_steps={self.max_steps}")
        groups += self._unreleased_turns(groups)
        steps = recorder.steps_frame()
        reqs = requests_frame(groups)
        summary, serving = summarize(steps, reqs, num_preemptions=sched.num_preemptions,
                                     prefix_hit_rate=self.allocator.stats().get("prefix_hit_rate"))
        summary |= policy_summary(reqs, sched.cfg)
        outputs = {g.request_id: self._outputs_of(g) for g in groups if g.status is GroupStatus.FINISHED}
        memmap = None
        if self._snapshots:
            memmap = {"time_s": np.array([t for t, _, _ in self._snapshots]),
                      "category": np.stack([c for _, c, _ in self._snapshots]),
                      "owner": np.stack([o for _, _, o in self._snapshots])}
        return EngineOutput(summary, steps, reqs, outputs, sched.num_swapped_out_slots,
                            sched.num_swapped_in_slots, memmap, serving)

    def _live_lens(self, counts_blocks: bool) -> tuple[dict[int, int], int, int]:
        """Every live sequence's final length (sample holds' included), the slots they would hold
        without sharing, and (``counts_blocks``) their blocks holding a computed token."""
        bs = self.allocator.block_size
        bs_minus_1 = bs - 1
        final_lens: dict[int, int] = {}
        logical = 0  # slots the live sequences would hold without sharing
        seq_blocks = 0  # blocks holding a computed token, per sequence (no sharing)
        if counts_blocks:
            for g in self.scheduler.running:
                seqs = g.seqs
                if len(seqs) == 1:
                    s = seqs[0]
                    final_lens[s.seq_id] = g.kv_final_len
                    computed = s.num_computed
                    logical += computed
                    seq_blocks += (computed + bs_minus_1) // bs
                    continue
                for s in seqs:
                    final_lens[s.seq_id] = g.kv_final_len
                    computed = s.num_computed
                    logical += computed
                    seq_blocks += (computed + bs_minus_1) // bs
        else:  # no block counts to record (contiguous allocators): the same pass less the blocks
            for g in self.scheduler.running:
                seqs = g.seqs
                if len(seqs) == 1:
                    s = seqs[0]
                    final_lens[s.seq_id] = g.kv_final_len
                    logical += s.num_computed
                    continue
                for s in seqs:
                    final_lens[s.seq_id] = g.kv_final_len
                    logical += s.num_computed
        final_lens.update(self.scheduler.sample_holds.final_lens())
        return final_lens, logical, seq_blocks

    def _queue_released(self, pending: list[Request], next_arrival: int) -> None:
        """Next turns of conversations finished this step join the arrivals, in arrival order."""
        for request in self._released:
            bisect.insort(pending, request, lo=next_arrival, key=lambda r: (r.arrival_s, r.request_id))
        self._released.clear()

    def _computed_blocks(self, per_sequence: int, counts: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """The paper's block counts over computed tokens: ``(per_sequence, distinct)`` blocks
        holding at least one computed token, per table and once (``per_sequence``: summed over the
        running sequences by the caller), taken right after scheduling as the paper takes them
        (Kwon et al., SOSP'23, section 6.3, Fig 15): every beam and fork of the step is held, the
        beams output processing will drop included. The allocator counts its tables' blocks, which also hold
        the blocks just taken for this step's new tokens; those are fresh and private (a fork
        shares only computed blocks), so they leave both counts alike:
        distinct = per_sequence - (allocated per table - allocated distinct). ``counts``: the
        allocator's ``block_counts``, where the caller has them."""
        if counts is None:
            counts = self.allocator.block_counts()
        if counts is None:
            return None
        return per_sequence, per_sequence - (counts[0] - counts[1])

    def _tier_row(self) -> dict[str, int]:
        """The tiers' bytes held after this step and moved during it, swap preemption's included."""
        row = self.tiers.step_row()
        sched, slot_bytes = self.scheduler, self.tiers.slot_bytes
        out, back = sched.num_swapped_out_slots, sched.num_swapped_in_slots
        row["tier_bytes_swap_out"] = (out - self._swap_seen[0]) * slot_bytes
        row["tier_bytes_swap_in"] = (back - self._swap_seen[1]) * slot_bytes
        self._swap_seen = (out, back)
        return row

    def _add_load_time(self, result: StepResult) -> None:
        """This step's loads from the tiers: blocking adds them, overlap what compute does not hide."""
        loads = self.allocator.take_tier_loads()
        if loads:
            extra = self.load_cost.critical(loads, result.duration_s)
            result.duration_s += extra
            self.load_s += extra

    def _snapshot(self, now: float, final_lens: dict[int, int]) -> None:
        """Category (0 external, 1 token, 2 reserved, 3 internal) and owner request of every slot."""
        alloc = self.allocator
        bs = alloc.block_size
        category = np.zeros(alloc.num_slots, dtype=np.int8)
        owner = np.full(alloc.num_slots, -1, dtype=np.int32)
        spans = []
        for group in self.scheduler.running:
            for seq in group.seqs:
                table = np.asarray(alloc.block_table(seq.seq_id), dtype=np.int64)
                slots = (table[:, None] * bs + np.arange(bs)).ravel()
                held = np.repeat(table >= 0, bs)  # negative entries: blocks released (paged_window)
                spans.append((slots, held, alloc.num_tokens(seq.seq_id), final_lens[seq.seq_id], group.request_id))
        for cat in (3, 2, 1):  # later passes win: a slot is token over reserved over internal
            for slots, held, ntok, final, rid in spans:
                pos = np.arange(len(slots))
                mask = (pos >= final) if cat == 3 else ((pos >= ntok) & (pos < final)) if cat == 2 else (pos < ntok)
                mask &= held
                category[slots[mask]] = cat
                owner[slots[mask]] = rid
        self._snapshots.append((now, category, owner))

    # -- per-step output processing ----------------------------------------------------------
    def _unreleased_turns(self, groups: list[Group]) -> list[Group]:
        """Later turns of conversations whose turn was rejected: rejected too, with that reason."""
        lost = []
        for group in groups:
            if group.status is GroupStatus.REJECTED and group.request.follow_up is not None:
                for turn in later_turns(group.request):
                    lost.append(Group(turn, []))
                    lost[-1].status = GroupStatus.REJECTED
                    lost[-1].reject_reason = f"an earlier turn of its conversation (request {group.request_id}) was rejected"
        return lost

    def _new_group(self, request: Request) -> Group:
        return Group(request, [Seq(self.scheduler.new_seq_id(), list(request.prompt_ids))])

    def _process(self, result: StepResult, now: float) -> int:
        """Append sampled tokens, fork samples and beams, finish groups; returns groups finished."""
        sched = self.scheduler
        finished = 0
        next_tokens, stop_ids = result.next_tokens, self.cfg.stop_token_ids
        forks = sched.pending_forks  # has_pending_forks(group) is bool(forks.get(group.request_id))
        for group in sched.sampled_groups:  # in the order of their first sampling chunk
            seqs = group.seqs
            if len(seqs) == 1 and group.forked and not group.is_beam and not stop_ids \
                    and not (forks and forks.get(group.request_id)):  # plain decode: _sample_step's one case
                seq = seqs[0]
                token = next_tokens.get(seq.seq_id)
                if token is not None:
                    seq.tokens.append(token)
                    generated = seq.num_generated = seq.num_generated + 1
                else:
                    generated = seq.num_generated
                times = seq.token_times
                if generated > len(times):
                    times.append(now)
                if group.first_token_s is None:
                    group.first_token_s = now
                if seq.stopped or generated >= group.output_len:
                    self._finish(group, seq.tokens, now)
                    finished += 1
                continue
            if group.is_beam:
                self._beam_step(group, result)
            else:
                self._sample_step(group, result)
            forking = sched.has_pending_forks(group)
            for seq in (*group.seqs, *(sched.pending_seqs(group) if forking else ()), *group.stopped_seqs):
                if seq.num_generated > len(seq.token_times):  # stopped: its last token, this step
                    seq.token_times.append(now)
            if group.first_token_s is None:
                group.first_token_s = now
            if not forking and group.done:
                self._finish(group, max(group.seqs, key=lambda s: s.cum_logprob).tokens, now)
                finished += 1
        return finished

    def _finish(self, group: Group, best_tokens: list[int], now: float) -> None:
        group.best_tokens = best_tokens
        self.scheduler.finish(group, now)
        if group.request.follow_up is not None:
            self._released.append(next_turn(group.request, best_tokens, now))

    def _sample_step(self, group: Group, result: StepResult) -> None:
        output_len = group.output_len
        stop_ids = self.cfg.stop_token_ids
        next_tokens = result.next_tokens
        for seq in list(group.seqs) if stop_ids else group.seqs:  # a stop may free a sequence
            token = next_tokens.get(seq.seq_id)
            if token is None:
                continue
            seq.tokens.append(token)
            seq.num_generated += 1
            if stop_ids and token in stop_ids:
                seq.stopped = True
                self._release_stopped(group, seq)
            if not group.forked:
                group.forked = True
                for extra in result.extra_tokens.get(seq.seq_id, ()):
                    if output_len > 1:
                        self.scheduler.add_pending_fork(group, seq, extra, 0.0)
                    else:  # a one-token answer is done: its extra samples need no K/V
                        group.final_beams.append((0.0, seq.tokens[:-1] + [extra]))
                if seq.stopped and self.scheduler.has_pending_forks(group):
                    self.scheduler.hand_over(group, seq)
                break

    def _release_stopped(self, group: Group, seq: Seq) -> None:
        """Free the blocks of a sample that stopped at EOS while its group runs on (its tokens stay
        an output). Not while forks are pending: they copy from their parents' blocks."""
        if not group.forked or self.scheduler.has_pending_forks(group) or len(group.seqs) == 1:
            return  # the group finishes now, or soon, and frees it then
        self.scheduler.free_seq(group, seq)
        group.stopped_seqs.append(seq)

    def _beam_step(self, group: Group, result: StepResult) -> None:
        """Keep the beam_width best continuations of all beams (cumulative log-probability).

        As transformers' beam search without EOS: every step keeps the top beam_width (beam, token)
        candidates over all beams; on the last step those candidates are the finished hypotheses, so a
        beam may end as several (the extras never need K/V: they are kept in ``group.final_beams``)."""
        width = group.request.beam_width
        candidates = []
        for seq in group.seqs:
            for token, logprob in result.top_logprobs.get(seq.seq_id, ()):
                candidates.append((seq.cum_logprob + logprob, seq.sample_index, token, seq))
        if not candidates:
            return
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        picks: dict[int, list[tuple[float, int]]] = {}
        parents: dict[int, Seq] = {}
        for score, _, token, seq in candidates[:width]:
            picks.setdefault(seq.seq_id, []).append((score, token))
            parents[seq.seq_id] = seq
        for seq in list(group.seqs):
            if seq.seq_id not in picks:
                self.scheduler.free_seq(group, seq)
        for seq_id, chosen in picks.items():
            seq = parents[seq_id]
            score, token = chosen[0]
            seq.tokens.append(token)
            seq.cum_logprob = score
            seq.num_generated += 1
            for extra_score, extra_token in chosen[1:]:
                if seq.num_generated < group.request.output_len:
                    self.scheduler.add_pending_fork(group, seq, extra_token, extra_score)
                else:
                    group.final_beams.append((extra_score, seq.tokens[:-1] + [extra_token]))
        group.forked = True

    @staticmethod
    def _outputs_of(group: Group) -> list[list[int]]:
        prompt_len = group.request.prompt_len
        if group.is_beam:  # ranked by cumulative log-probability (all have the output length: no length penalty)
            hypotheses = [(s.cum_logprob, s.tokens) for s in group.seqs] + group.final_beams
            return [tokens[prompt_len:] for _, tokens in sorted(hypotheses, key=lambda h: -h[0])]
        samples = [s.tokens for s in sorted(group.seqs + group.stopped_seqs, key=lambda s: s.sample_index)]
        return [tokens[prompt_len:] for tokens in samples + [tokens for _, tokens in group.final_beams]]


def next_turn(request: Request, tokens: list[int], now: float) -> Request:
    """The conversation's next turn: this turn's prompt and generated tokens, then the user's."""
    follow: FollowUp = request.follow_up
    return Request(follow.request_id, tokens + follow.user_ids, follow.output_len, now + follow.think_s,
                   request.n, request.beam_width, follow.next, request.priority)
