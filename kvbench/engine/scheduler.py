"""Iteration-level scheduler: which sequences run this step, through the allocator seam.

Each step, in this order (as Orca and vLLM do):
1. running groups, oldest first: pending forks, then one decode token per sequence or the next
   prefill chunk; when the allocator is out of memory, the most recently arrived running group
   is preempted (recompute: freed and requeued at the front; swap: K/V copied to a bounded host
   pool) and the grow is retried;
2. swapped groups come back in FCFS order when they fit (groups of several sequences are
   always swapped out when the host pool has room: recomputing them would lose their sharing);
3. waiting groups are admitted FCFS within the token budget, ``max_num_seqs`` and the
   allocator, unless a group was preempted this step or swapped groups wait.

The allocator is asked before anything is written: every slot in the batch came from it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from allocators.base import Allocator, Fit
from kvbench.batch import SeqChunk, StepBatch, SwapOp
from kvbench.engine.sequence import Group, GroupStatus, Seq


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    preemption: str = "recompute"  # recompute | swap
    swap_slots: int = 0  # capacity of the host pool, in token slots
    max_model_len: int = 2048


@dataclass(slots=True)
class _PendingFork:
    """A sample or beam to fork from ``parent`` before it grows again: the parent's tokens with
    its last (just sampled, not yet computed) token replaced by ``token``."""

    parent: Seq
    token: int
    cum_logprob: float


class _OutOfMemory(Exception):
    pass


class Scheduler:
    def __init__(
        self,
        cfg: SchedulerConfig,
        allocator: Allocator,
        *,
        need_block_tables: bool = True,
    ) -> None:
        self.cfg = cfg
        self.allocator = allocator
        self.need_block_tables = need_block_tables
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self.host_used = 0  # slots held in the host pool
        self.host_tokens: dict[int, int] = {}  # seq_id -> tokens of K/V held in the host pool
        self.num_preemptions = 0
        self.num_swapped_out_slots = 0
        self.num_swapped_in_slots = 0
        self._pending_forks: dict[int, list[_PendingFork]] = {}  # request_id -> forks to make
        self._next_seq_id = 0
        # per-step scratch
        self._swap_out: list[SwapOp] = []
        self._swap_in: list[SwapOp] = []
        self._preempted_now = False

    # -- public ------------------------------------------------------------------------------
    def new_seq_id(self) -> int:
        self._next_seq_id += 1
        return self._next_seq_id - 1

    def add(self, group: Group) -> None:
        """A request arrives; rejected at once if it can never fit in the model's length."""
        request = group.request
        if request.prompt_len + request.output_len > self.cfg.max_model_len:
            self._reject(group, f"prompt {request.prompt_len} + output {request.output_len} tokens "
                                f"exceed max_model_len {self.cfg.max_model_len}")
        elif group.kv_final_len > self.allocator.num_slots:
            self._reject(group, f"needs {group.kv_final_len} KV slots; the pool has {self.allocator.num_slots}")
        elif not self.cfg.chunked_prefill and request.prompt_len > self.cfg.max_num_batched_tokens:
            self._reject(group, f"prompt of {request.prompt_len} tokens exceeds max_num_batched_tokens "
                                f"{self.cfg.max_num_batched_tokens} with chunked_prefill off")
        else:
            self.waiting.append(group)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self) -> StepBatch:
        """Pick this step's batch; allocates through the allocator as it goes."""
        self._swap_out, self._swap_in = [], []
        self._copy_ops: list = []
        self._preempted_now = False
        budget = self.cfg.max_num_batched_tokens
        seq_budget = self.cfg.max_num_seqs
        chunks: list[SeqChunk] = []

        i = 0
        while i < len(self.running):
            group = self.running[i]
            group_chunks: list[SeqChunk] = []
            while True:
                try:
                    self._do_pending_forks(group)
                    self._chunks_for(group, budget, seq_budget, group_chunks)
                    break
                except _OutOfMemory:
                    victim = max(self.running, key=lambda g: (g.request.arrival_s, g.request_id))
                    if victim is group:  # its chunks of this step will not run: undo their growth
                        grown = {c.seq_id: c.query_len for c in group_chunks}
                        for seq in group.seqs:
                            seq.num_computed -= grown.get(seq.seq_id, 0)
                        self._preempt(group)
                        group_chunks = []
                        break
                    self._preempt(victim)
                    # the victim arrived later, so it sits after i and was not scheduled yet
            if group.status is not GroupStatus.RUNNING:
                continue
            chunks.extend(group_chunks)
            budget -= sum(c.query_len for c in group_chunks)
            seq_budget -= len(group_chunks)
            i += 1

        if not self._preempted_now:
            while self.swapped and self._swap_in_group(self.swapped[0]):
                group = self.swapped.popleft()
                group_chunks = self._schedule_admitted(group, budget, seq_budget)
                chunks.extend(group_chunks)
                budget -= sum(c.query_len for c in group_chunks)
                seq_budget -= len(group_chunks)

        if not self._preempted_now and not self.swapped and self._admission_open():
            while self.waiting and budget > 0 and seq_budget >= len(self.waiting[0].seqs):
                group = self.waiting[0]
                pending = sum(s.pending for s in group.seqs)
                if not self.cfg.chunked_prefill and pending > budget:
                    break
                fit = self._admit_group(group)
                if fit is Fit.LATER:
                    break
                self.waiting.popleft()
                if fit is Fit.NEVER:
                    continue
                group_chunks = self._schedule_admitted(group, budget, seq_budget)
                chunks.extend(group_chunks)
                budget -= sum(c.query_len for c in group_chunks)
                seq_budget -= len(group_chunks)

        return StepBatch(
            chunks=chunks,
            block_size=self.allocator.block_size,
            copy_ops=self._copy_ops + self.allocator.take_copy_ops(),
            swap_out=self._swap_out,
            swap_in=self._swap_in,
        )

    def _admission_open(self) -> bool:
        """Whether waiting groups may be admitted this step (scheduling styles override it:
        ``kvbench.engine.policies``)."""
        return True

    def reject_head(self, reason: str) -> None:
        """Reject the first waiting group: it cannot be scheduled even with nothing else running."""
        head = self.waiting.popleft()
        self._reject(head, head.reject_reason or reason)

    def reject_swapped_head(self, reason: str) -> None:
        """Reject the first swapped group: even alone in the pool it no longer fits."""
        head = self.swapped.popleft()
        self._release_host(head)
        self._reject(head, reason)

    def has_pending_forks(self, group: Group) -> bool:
        return bool(self._pending_forks.get(group.request_id))

    def add_pending_fork(self, group: Group, parent: Seq, token: int, cum_logprob: float) -> None:
        self._pending_forks.setdefault(group.request_id, []).append(_PendingFork(parent, token, cum_logprob))

    def finish(self, group: Group, now: float) -> None:
        for seq in group.seqs:
            self.allocator.free(seq.seq_id)
        group.status = GroupStatus.FINISHED
        group.finish_s = now
        self.running.remove(group)

    def free_seq(self, group: Group, seq: Seq) -> None:
        """Drop one sequence of a running group (a beam that fell out)."""
        self.allocator.free(seq.seq_id)
        group.seqs.remove(seq)

    # -- running -----------------------------------------------------------------------------
    def _do_pending_forks(self, group: Group) -> None:
        forks = self._pending_forks.get(group.request_id)
        while forks:
            fork = forks[0]
            child_id = self.new_seq_id()
            if not self.allocator.fork(fork.parent.seq_id, child_id, group.kv_final_len):
                raise _OutOfMemory
            forks.pop(0)
            child = Seq(child_id, fork.parent.tokens[:-1] + [fork.token],
                        num_computed=fork.parent.num_computed, num_generated=fork.parent.num_generated,
                        sample_index=len(group.seqs), cum_logprob=fork.cum_logprob)
            group.seqs.append(child)
        self._pending_forks.pop(group.request_id, None)

    def _chunks_for(self, group: Group, budget: int, seq_budget: int, chunks: list[SeqChunk]) -> None:
        """Grow the group's sequences by their next chunks, appending to ``chunks``.

        Raises _OutOfMemory with the chunks made so far kept, so a retry after a preemption
        resumes where it stopped. The beams of a group sample in the same step: while they
        cannot all finish their pending tokens in this step, each holds its last one back.
        """
        allocator = self.allocator
        budget -= sum(c.query_len for c in chunks)
        seq_budget -= len(chunks)
        hold_back = 0  # tokens each sequence keeps pending, so that beams sample in the same step
        if group.is_beam and group.forked:
            if chunks:
                hold_back = 0 if all(c.sample for c in chunks) else 1
            else:
                todo = [s.pending for s in group.seqs if s.pending > 0]
                hold_back = 0 if sum(todo) <= budget and len(todo) <= seq_budget else 1
        output_len = group.request.output_len
        for seq in group.seqs:
            pending = seq.pending - hold_back
            if pending <= 0 or seq.num_generated >= output_len:  # finished samples wait for the group
                continue
            if budget <= 0 or seq_budget <= 0:
                break
            size = pending if (pending <= budget or not self.cfg.chunked_prefill) else budget
            if size > budget:
                break
            start = seq.num_computed
            new_tokens = seq.tokens[start:start + size]
            slots = allocator.grow(seq.seq_id, size, new_tokens)
            if slots is None:
                raise _OutOfMemory
            seq.num_computed += size
            budget -= size
            seq_budget -= 1
            sample = seq.num_computed == len(seq.tokens)
            first_sample = sample and not group.forked
            chunks.append(SeqChunk(
                seq_id=seq.seq_id,
                token_ids=new_tokens,
                start_pos=start,
                block_table=allocator.block_table(seq.seq_id) if self.need_block_tables else [],
                slot_mapping=slots,
                sample=sample,
                num_logprobs=group.request.beam_width if (sample and group.is_beam) else 0,
                num_samples=group.request.n if (first_sample and group.request.n > 1) else 1,
                request_id=group.request_id,
                sample_index=seq.sample_index,
            ))

    # -- preemption --------------------------------------------------------------------------
    def _preempt(self, group: Group) -> None:
        self.running.remove(group)
        self._preempted_now = True
        self.num_preemptions += 1
        group.num_preemptions += 1
        held = sum(s.num_computed for s in group.seqs)
        # Groups of several sequences are swapped even under `recompute` (as vLLM does):
        # recomputing them would lose the blocks their samples or beams share.
        swap = self.cfg.preemption == "swap" or len(group.seqs) > 1
        if swap and self.host_used + held <= self.cfg.swap_slots:
            slots = {seq.seq_id: self._slots_of(seq, 0, seq.num_computed) for seq in group.seqs}
            redirect = self._drop_copies_into({s for group_slots in slots.values() for s in group_slots})
            for seq in group.seqs:
                if seq.num_computed:
                    self._swap_out.append(SwapOp(seq.seq_id, [redirect.get(s, s) for s in slots[seq.seq_id]]))
                    self.host_tokens[seq.seq_id] = seq.num_computed
                self.allocator.free(seq.seq_id)
            self.host_used += held
            self.num_swapped_out_slots += held
            group.status = GroupStatus.SWAPPED
            self.swapped.append(group)
        else:
            for seq in group.seqs:
                self.allocator.free(seq.seq_id)
                seq.num_computed = 0
            group.status = GroupStatus.WAITING
            self.waiting.appendleft(group)
        self._materialize_forks(group)

    def _drop_copies_into(self, victim_slots: set[int]) -> dict[int, int]:
        """Copies queued this step into slots about to be swapped out: the executor swaps out
        before it copies, so read those slots from the copies' sources instead."""
        redirect: dict[int, int] = {}
        keep = []
        for op in self._copy_ops + self.allocator.take_copy_ops():
            if any(op.dst + i in victim_slots for i in range(op.length)):
                for i in range(op.length):
                    redirect[op.dst + i] = redirect.get(op.src + i, op.src + i)
            else:
                keep.append(op)
        self._copy_ops = keep
        return redirect

    def _materialize_forks(self, group: Group) -> None:
        """Forks not made yet become sequences of their own, to be recomputed."""
        for fork in self._pending_forks.pop(group.request_id, []):
            parent = fork.parent
            group.seqs.append(Seq(self.new_seq_id(), parent.tokens[:-1] + [fork.token],
                                  num_generated=parent.num_generated, sample_index=len(group.seqs),
                                  cum_logprob=fork.cum_logprob))

    def _swap_in_group(self, group: Group) -> bool:
        """Re-admit a swapped group and queue the host-to-device copies; False if it does not fit."""
        fit = self._admit_seqs(group)
        if fit is Fit.LATER:
            return False
        if fit is Fit.NEVER:  # cannot happen for a group that fitted before; keep the books right
            self.swapped.popleft()
            self._release_host(group)
            self._reject(group, group.reject_reason)
            return False
        admitted: list[tuple[Seq, list[int], int]] = []
        for seq in group.seqs:
            held = self.host_tokens.get(seq.seq_id, 0)
            start = seq.num_computed  # prefix-cached tokens need no copy
            if held > start:
                slots = self.allocator.grow(seq.seq_id, held - start, seq.tokens[start:held])
                if slots is None:  # admit allocated the whole prompt: the seam forbids this
                    raise RuntimeError(f"allocator refused to grow seq {seq.seq_id} inside its admitted prompt")
                admitted.append((seq, slots, start))
                seq.num_computed = held
        for seq, slots, start in admitted:
            self._swap_in.append(SwapOp(seq.seq_id, slots, offset=start))
            self.num_swapped_in_slots += len(slots)
        self._release_host(group)
        group.status = GroupStatus.RUNNING
        self._insert_running(group)
        return True

    def _release_host(self, group: Group) -> None:
        for seq in group.seqs:
            self.host_used -= self.host_tokens.pop(seq.seq_id, 0)

    # -- admission ---------------------------------------------------------------------------
    def _admit_group(self, group: Group) -> Fit:
        fit = self._admit_seqs(group)
        if fit is Fit.NEVER:
            self._reject(group, group.reject_reason)
        elif fit is Fit.OK:
            group.status = GroupStatus.RUNNING
            self._insert_running(group)
        return fit

    def _admit_seqs(self, group: Group) -> Fit:
        """Admit every sequence of the group or none of them."""
        done: list[Seq] = []
        final_len = group.kv_final_len
        for seq in group.seqs:
            admission = self.allocator.admit(seq.seq_id, seq.tokens, self.cfg.max_model_len, final_len)
            if not admission.ok:
                for s in done:
                    self.allocator.free(s.seq_id)
                    s.num_computed = 0
                if admission.fit is Fit.NEVER:
                    group.reject_reason = admission.reason
                return admission.fit
            seq.num_computed = admission.num_cached_tokens
            done.append(seq)
        return Fit.OK

    def _schedule_admitted(self, group: Group, budget: int, seq_budget: int) -> list[SeqChunk]:
        chunks: list[SeqChunk] = []
        try:
            self._chunks_for(group, budget, seq_budget, chunks)
        except _OutOfMemory:  # admit allocated the whole prompt: nothing here needs memory
            raise RuntimeError(f"allocator refused a prompt chunk of request {group.request_id} it admitted")
        return chunks

    def _insert_running(self, group: Group) -> None:
        key = (group.request.arrival_s, group.request_id)
        idx = len(self.running)
        while idx > 0 and (self.running[idx - 1].request.arrival_s, self.running[idx - 1].request_id) > key:
            idx -= 1
        self.running.insert(idx, group)

    def _reject(self, group: Group, reason: str) -> None:
        group.status = GroupStatus.REJECTED
        group.reject_reason = reason or "can never fit"

    # -- helpers -----------------------------------------------------------------------------
    def _slots_of(self, seq: Seq, start: int, stop: int) -> list[int]:
        table = self.allocator.block_table(seq.seq_id)
        bs = self.allocator.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]
