"""Iteration-level scheduler: which sequences run this step, through the allocator seam.

Each step, in this order (as Orca and vLLM do):
1. running groups, oldest first: pending forks, then one decode token per sequence or the next
   prefill chunk; when the allocator is out of memory, a running group is preempted (by
   default the most recently arrived; ``engine.preemption_victim``, ``kvbench.engine.victims``;
   a victim scheduled earlier in the step first gives back that step's chunks, tokens and
   budget, as vLLM v1 does): recompute frees it and requeues it at the front (at the back
   with ``keep_arrival_order`` off); swap copies its K/V to a bounded host pool; then the grow
   is retried; a group out of memory alone in the pool twice in a row without a new token
   never fits and is rejected;
2. swapped groups come back in queue order when they fit (groups of several sequences are
   always swapped out when the host pool has room, as vLLM does);
3. waiting groups are admitted in queue order within the token budget, ``max_num_seqs`` and
   the allocator, unless a group was preempted this step or swapped groups wait.

The queue order is ``engine.policy`` (``kvbench.engine.queue_orders``): FCFS by default, which
never reorders (arrivals at the back, groups preempted by recompute at the front).

A preempted group comes back with its sharing (``kvbench.engine.restore``): one sequence is
admitted, the others fork from it where their tokens part, swapped-in slots come back once, and
a group that fits, with its next tokens, comes back whole or not at all. So a group that fitted
before its preemption still fits. The allocator is asked before anything is written: every
slot in the batch came from it; the engine commits the grown tokens once the step has run.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields

from allocators.base import Allocator, Fit
from kvbench.batch import BatchCounts, SeqChunk, StepBatch, SwapOp
from kvbench.engine.queue_orders import make_queue_order
from kvbench.engine.restore import ForkTree, plan_restore
from kvbench.engine.sample_holds import SampleHolds
from kvbench.engine.sequence import Group, GroupStatus, Seq
from kvbench.engine.swap_space import SwapSpace
from kvbench.engine.victims import make_victim_choice


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    preemption: str = "recompute"  # recompute | swap
    swap_slots: int = 0  # capacity of the host pool, in token slots
    max_model_len: int = 2048
    stop_token_ids: tuple[int, ...] = ()  # a sample ends when it samples one (empty: EOS ignored)
    policy: str = "fcfs"  # queue order: fcfs | priority | sjf | lpm (kvbench.engine.queue_orders)
    max_wait_s: float | None = None  # aging bound of the non-FCFS orders (None: no aging)
    sjf_error: float = 0.0  # sjf: log-normal error of the output-length predictor (0: true lengths)
    preemption_victim: str = "newest"  # newest | lowest_priority | least_computed | most_blocks
    keep_arrival_order: bool = True  # a preempted group returns at its place (False: at the back, as if new)
    seed: int = 0  # seeds the sjf predictor


@dataclass(slots=True)
class _PendingFork:
    """``child`` starts as a copy of ``parent`` once the parent holds exactly ``at`` computed
    tokens, computed in an earlier step (so their K/V are written): a new sample or beam
    (``at`` = the parent's length - 1, its last token just sampled) or a sequence of a preempted
    group coming back with its sharing (see ``kvbench.engine.restore``)."""

    parent: Seq
    child: Seq
    at: int


def beam_limit_error(beam_width: int, max_num_seqs: int, max_num_batched_tokens: int) -> str | None:
    """Why beams of this width can never run under these batch limits, or None: the beams of a
    request sample in the same step, one token each."""
    limit = min(max_num_seqs, max_num_batched_tokens)
    if beam_width > limit:
        knob = "max_num_seqs" if max_num_seqs <= max_num_batched_tokens else "max_num_batched_tokens"
        return f"beam_width {beam_width} exceeds {knob} {limit}: a request's beams must decode in one step"
    return None


# the decode fast path takes the running groups this many at a time: a grow short of memory
# sends one group to the general path, and the next pass gathers again from the group after it
PLAIN_RUN_GROUPS = 32
new_chunk = tuple.__new__  # SeqChunk from its ten fields in order, without the named tuple's __new__
NO_TABLE: list[int] = []  # the block table of a chunk for an executor that reads none (never written)


class _OutOfMemory(Exception):
    pass


class Scheduler:
    prompt_step = False  # the last schedule() ran prompts only, the running groups set aside (prompt_first)

    def __init__(
        self,
        cfg: SchedulerConfig,
        allocator: Allocator,
        *,
        need_block_tables: bool = True,
        swap_space: SwapSpace | None = None,
    ) -> None:
        self.cfg = cfg
        self.allocator = allocator
        self.need_block_tables = need_block_tables
        # a mixed model's allocator with a table per layer group: the executor gets every group's (StepBatch)
        self.per_group_tables = need_block_tables and bool(getattr(allocator, "per_group_tables", False))
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        # the host pool of swapped-out K/V: its own, or the offload host tier's (kvbench/engine/swap_space.py)
        self.swap_space = swap_space if swap_space is not None else SwapSpace(cfg.swap_slots)
        self.host_tokens: dict[int, int] = {}  # seq_id -> tokens of K/V held in the host pool
        self.num_preemptions = 0
        self.num_swapped_out_slots = 0
        self.num_swapped_in_slots = 0
        self._pending_forks: dict[int, list[_PendingFork]] = {}  # request_id -> forks to make
        self._next_seq_id = 0
        self.sample_holds = SampleHolds(allocator, self.new_seq_id)  # samples' regions, where forks copy
        # per-step scratch
        self.sampled_groups: list[Group] = []  # groups with a sampling chunk in the last batch, in chunk order
        self._swap_out: list[SwapOp] = []
        self._swap_in: list[SwapOp] = []
        self._preempted_now = False
        self.plain_decodes = 0  # sequences of the last step on the decode fast path (read by a census)
        self.now = 0.0  # the engine's clock at the start of the step being scheduled
        self.order = make_queue_order(cfg.policy, allocator, max_wait_s=cfg.max_wait_s, sjf_error=cfg.sjf_error,
                                      seed=cfg.seed)
        self.victims = make_victim_choice(cfg.preemption_victim, allocator)
        self.lost_tokens = 0  # computed tokens discarded by preemptions by recompute
        self._num_exclusive = 0  # groups with ``exclusive`` set, wherever they are (finished ones too)

    # -- public ------------------------------------------------------------------------------
    def new_seq_id(self) -> int:
        self._next_seq_id += 1
        return self._next_seq_id - 1

    def add(self, group: Group) -> None:
        """A request arrives; rejected at once if it can never fit in the model's length, the
        pool or one step's batch."""
        request = group.request
        beam_error = beam_limit_error(request.beam_width, self.cfg.max_num_seqs, self.cfg.max_num_batched_tokens)
        if beam_error:
            self._reject(group, beam_error)
        elif request.prompt_len + request.output_len > self.cfg.max_model_len:
            self._reject(group, f"prompt {request.prompt_len} + output {request.output_len} tokens "
                                f"exceed max_model_len {self.cfg.max_model_len}")
        elif group.kv_final_len > getattr(self.allocator, "max_seq_tokens", self.allocator.num_slots):
            self._reject(group, f"needs {group.kv_final_len} KV slots; the pool has {self.allocator.num_slots}")
        elif not self.cfg.chunked_prefill and request.prompt_len > self.cfg.max_num_batched_tokens:
            self._reject(group, f"prompt of {request.prompt_len} tokens exceeds max_num_batched_tokens "
                                f"{self.cfg.max_num_batched_tokens} with chunked_prefill off")
        else:
            self.waiting.append(group)

    @property
    def preempted_now(self) -> bool:
        """The last schedule() preempted a group (and so admitted none)."""
        return self._preempted_now

    def _seq_limit(self) -> int:
        """Sequences this step may schedule (a policy may subtract sequences it holds aside)."""
        return self.cfg.max_num_seqs

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self) -> StepBatch:
        """Pick this step's batch; allocates through the allocator as it goes."""
        self._swap_out, self._swap_in = [], []
        self._copy_ops: list = []
        self._preempted_now = False
        budget = self.cfg.max_num_batched_tokens
        seq_budget = self._seq_limit()
        chunks: list[SeqChunk] = []
        counts = BatchCounts()
        bs = self.allocator.block_size
        sampled = self.sampled_groups = []

        allocator, pending_forks, tables = self.allocator, self._pending_forks, self.need_block_tables
        plain_seqs = plain_draws = plain_pairs = plain_blocks = 0
        running = self.running
        general: set[int] = set()  # request ids scheduled on the general path in this step
        plain_undone = 0  # fast-path groups preempted later in the step (their chunks taken back)
        i = 0
        while i < len(running):
            run, seqs, grows = self._plain_run(i, min(budget, seq_budget, PLAIN_RUN_GROUPS))
            if run:  # the decode fast path: grown in one call, the rules of _chunks_for for this case
                grown = allocator.grow_many(grows)
                add_chunk, block_table = chunks.append, allocator.block_table
                for group, seq, (seq_id, new_tokens), slots in zip(run, seqs, grows, grown):
                    start = seq.num_computed
                    end = seq.num_computed = start + 1
                    if group.forked:
                        draws = 1
                    else:
                        n = group.request.n
                        draws = n if n > 1 else 1
                    add_chunk(new_chunk(SeqChunk, (
                        seq_id, new_tokens, start, block_table(seq_id) if tables else NO_TABLE,
                        slots, True, 0, draws, group.request_id, seq.sample_index)))
                    # BatchCounts.add of this one sampling token, term by term (added after the loop)
                    plain_draws += draws
                    plain_pairs += end
                    plain_blocks += (end + bs - 1) // bs
                done = len(grown)
                sampled.extend(run[:done])
                plain_seqs += done
                budget -= done
                seq_budget -= done
                i += done
                if done == len(run) or i >= len(running):
                    continue
                # running[i] is out of memory: the general path below preempts and retries it
            group = running[i]
            group_chunks: list[SeqChunk] = []
            while True:
                try:
                    if group.request_id in pending_forks:
                        self._do_pending_forks(group, group_chunks)
                    self._chunks_for(group, budget, seq_budget, group_chunks)
                    break
                except _OutOfMemory:
                    victim = self.victims.choose(group, running)  # any running group, scheduled in this step or not
                    if victim is group:  # its chunks of this step will not run: undo their growth
                        grown = {c.seq_id: c.query_len for c in group_chunks}
                        for seq in group.seqs:
                            seq.num_computed -= grown.get(seq.seq_id, 0)
                        if self._stuck_alone(group):
                            self._reject_running(group)
                        else:
                            self._preempt(group)
                        group_chunks = []
                        break
                    if running.index(victim) < i:  # scheduled earlier in this step: take its chunks back
                        tokens, seqs = self._unschedule(victim, chunks, counts)
                        budget += tokens
                        seq_budget += seqs
                        if seqs and victim.request_id not in general:
                            plain_undone += 1
                        i -= 1
                    self._preempt(victim)
            if group.status is not GroupStatus.RUNNING:
                continue
            if group_chunks:
                chunks.extend(group_chunks)
                general.add(group.request_id)
                self._count(group, group_chunks, counts)
                for c in group_chunks:
                    budget -= len(c.token_ids)
                seq_budget -= len(group_chunks)
            i += 1
        self.plain_decodes = plain_seqs - plain_undone
        counts.num_requests += plain_seqs
        counts.num_tokens += plain_seqs
        counts.num_sampled += plain_seqs
        counts.num_draws += plain_draws
        counts.decode_pairs += plain_pairs
        counts.decode_blocks += plain_blocks

        closed = self._preempted_now or self._exclusive_running()
        if self.order.reorders and not closed:
            self.swapped = deque(self.order.arrange(self.swapped, self.now))
            self.waiting = deque(self.order.arrange(self.waiting, self.now))
        if not closed:
            while self.swapped:
                group = self.swapped[0]
                if group.exclusive and self.running:
                    break
                group_chunks = self._bring_back(group, budget, seq_budget, dict(self.host_tokens))
                if group_chunks is None:
                    break
                self.swapped.popleft()
                self._release_host(group)
                chunks.extend(group_chunks)
                if group_chunks:
                    self._count(group, group_chunks, counts)
                budget -= sum(c.query_len for c in group_chunks)
                seq_budget -= len(group_chunks)
                if group.exclusive:
                    closed = True
                    break

        if not closed and not self.swapped and self._admission_open():
            while self.waiting and budget > 0 and seq_budget > 0:  # a group comes back as one sequence, then forks
                group = self.waiting[0]
                if group.exclusive and self.running:
                    break
                if not self._may_chunk(group) and sum(s.pending for s in group.seqs) > budget:
                    break
                group_chunks = self._bring_back(group, budget, seq_budget, None)
                if group.status is GroupStatus.REJECTED:
                    self.waiting.popleft()
                    continue
                if group_chunks is None:
                    break
                self.waiting.popleft()
                chunks.extend(group_chunks)
                if group_chunks:
                    self._count(group, group_chunks, counts)
                budget -= sum(c.query_len for c in group_chunks)
                seq_budget -= len(group_chunks)
                if group.exclusive:
                    break

        page_maps, page_unmaps = self.allocator.take_page_ops()
        group_tables = None
        if self.per_group_tables:  # after every grow of the step: each chunk's own grow was its last
            group_tables = {c.seq_id: allocator.group_tables(c.seq_id) for c in chunks}
        return StepBatch(
            chunks=chunks,
            block_size=self.allocator.block_size,
            copy_ops=self._copy_ops + self.allocator.take_copy_ops(),
            swap_out=self._swap_out,
            swap_in=self._swap_in,
            page_maps=page_maps,
            page_unmaps=page_unmaps,
            counts=counts,
            group_tables=group_tables,
        )

    def _plain_run(self, start: int, limit: int) -> tuple[list[Group], list[Seq], list[tuple[int, list[int]]]]:
        """The running groups from index ``start`` on, at most ``limit``, in plain decode: one
        sequence with one token left to compute, not finished, no fork to make, not a beam; with
        their sequences and the grows they ask of the allocator ``(seq_id, [last token])``."""
        run: list[Group] = []
        seqs_of: list[Seq] = []
        grows: list[tuple[int, list[int]]] = []
        if limit <= 0:  # a negative stop would slice from the end
            return run, seqs_of, grows
        append, add_seq, add_grow = run.append, seqs_of.append, grows.append
        running, pending_forks = self.running, self._pending_forks
        for group in running[start:start + limit]:
            seqs = group.seqs
            if len(seqs) != 1 or group.is_beam or (pending_forks and group.request_id in pending_forks):
                break
            seq = seqs[0]
            tokens = seq.tokens
            if len(tokens) - seq.num_computed != 1 or seq.stopped or seq.num_generated >= group.output_len:
                break
            append(group)
            add_seq(seq)
            add_grow((seq.seq_id, tokens[-1:]))
        return run, seqs_of, grows

    def _count(self, group: Group, group_chunks: list[SeqChunk], counts: BatchCounts) -> None:
        """A group's chunks join the batch: add them to the step's sums."""
        sampled = counts.num_sampled
        counts.add(group_chunks, self.allocator.block_size)
        if counts.num_sampled > sampled:
            self.sampled_groups.append(group)

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

    @property
    def pending_forks(self) -> dict:
        """request_id -> the forks still to make for that group (an entry may be empty); read only."""
        return self._pending_forks

    def has_pending_forks(self, group: Group) -> bool:
        return bool(self._pending_forks.get(group.request_id))

    def pending_seqs(self, group: Group) -> list[Seq]:
        """The group's samples or beams that are decided but not forked yet."""
        return [fork.child for fork in self._pending_forks.get(group.request_id, ())]

    def add_pending_fork(self, group: Group, parent: Seq, token: int, cum_logprob: float) -> None:
        """A new sample or beam: ``parent``'s tokens with its last (just sampled) one replaced by
        ``token``. A sample whose first token is a stop token is already finished: it is kept as
        an output and never forks (it would hold blocks, and compute, for nothing)."""
        forks = self._pending_forks.setdefault(group.request_id, [])
        child = Seq(self.new_seq_id(), parent.tokens[:-1] + [token], num_generated=parent.num_generated,
                    sample_index=len(group.seqs) + len(group.stopped_seqs) + len(forks), cum_logprob=cum_logprob,
                    token_times=parent.fork_times(),
                    stopped=token in self.cfg.stop_token_ids)
        if child.stopped and not group.is_beam:
            group.stopped_seqs.append(child)
            self.sample_holds.release_one(group)
        else:
            forks.append(_PendingFork(parent, child, len(parent.tokens) - 1))
        if not forks:
            del self._pending_forks[group.request_id]

    def hand_over(self, group: Group, parent: Seq) -> None:
        """``parent`` stopped at its first sample while its other samples wait to fork from it:
        the first of them takes over the parent's sequence (the K/V it holds is the prompt they
        share) and the stopped sample is kept as an output, with no blocks. Without this a group
        could hold only finished sequences that forks still wait on, and never finish or restore."""
        forks = self._pending_forks[group.request_id]
        child = forks.pop(0).child
        for name in ("tokens", "stopped", "sample_index", "cum_logprob", "token_times"):
            mine, theirs = getattr(parent, name), getattr(child, name)
            setattr(parent, name, theirs)
            setattr(child, name, mine)
        group.stopped_seqs.append(child)
        self.sample_holds.release_one(group)
        if not forks:
            del self._pending_forks[group.request_id]

    def finish(self, group: Group, now: float) -> None:
        self.sample_holds.release_all(group)
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
    def _do_pending_forks(self, group: Group, grown_now: list[SeqChunk]) -> None:
        """Make the forks whose parent reached the fork point in an earlier step (not in this
        one: its new K/V are not written yet); a child made now may be a parent at once."""
        forks = self._pending_forks.get(group.request_id)
        if not forks:
            return
        live = {s.seq_id for s in group.seqs}
        busy = {c.seq_id for c in grown_now}
        made = True
        while made:
            made = False
            for fork in list(forks):
                parent = fork.parent
                if parent.seq_id not in live or parent.seq_id in busy or parent.num_computed != fork.at:
                    continue
                self.sample_holds.release_one(group)
                if not self.allocator.fork(parent.seq_id, fork.child.seq_id, group.kv_final_len):
                    raise _OutOfMemory
                forks.remove(fork)
                fork.child.num_computed = fork.at
                group.seqs.append(fork.child)
                live.add(fork.child.seq_id)
                made = True
        if not forks:
            self._pending_forks.pop(group.request_id, None)

    def _fork_points(self, group: Group) -> dict[int, int]:
        """seq_id -> the earliest point a pending fork needs it to stop at."""
        stops: dict[int, int] = {}
        for fork in self._pending_forks.get(group.request_id, ()):
            key = fork.parent.seq_id
            stops[key] = min(stops.get(key, fork.at), fork.at)
        return stops

    def _may_chunk(self, group: Group) -> bool:
        """A restored group recomputes its prompt plus what it generated: it may take chunks even
        with chunked prefill off, or a long one could never come back."""
        return self.cfg.chunked_prefill or group.num_preemptions > 0

    def _chunks_for(self, group: Group, budget: int, seq_budget: int, chunks: list[SeqChunk]) -> None:
        """Grow the group's sequences by their next chunks, appending to ``chunks``.

        Raises _OutOfMemory with the chunks made so far kept, so a retry after a preemption
        resumes where it stopped. The beams of a group sample in the same step: while they
        cannot all finish their pending tokens in this step, each holds its last one back.
        """
        allocator = self.allocator
        if chunks:
            for c in chunks:
                budget -= len(c.token_ids)
            seq_budget -= len(chunks)
        hold_back = 0  # tokens each sequence keeps pending, so that beams sample in the same step
        stops = self._fork_points(group) if group.request_id in self._pending_forks else None
        if group.is_beam and group.forked:
            if stops:
                hold_back = 1  # beams still to fork: none samples before all of them are back
            elif chunks:
                hold_back = 0 if all(c.sample for c in chunks) else 1
            else:
                todo = [s.pending for s in group.seqs if s.pending > 0]
                hold_back = 0 if sum(todo) <= budget and len(todo) <= seq_budget else 1
        request = group.request
        output_len = group.output_len
        tables = self.need_block_tables
        for seq in group.seqs:
            tokens, start = seq.tokens, seq.num_computed
            pending = len(tokens) - start - hold_back
            if stops:
                stop = stops.get(seq.seq_id)
                if stop is not None:
                    pending = min(pending, stop - start)
            if pending <= 0 or seq.stopped or seq.num_generated >= output_len:  # finished samples wait for the group
                continue
            if budget <= 0 or seq_budget <= 0:
                break
            if pending <= budget:
                size = pending
            elif self._may_chunk(group):
                size = budget
            else:
                break
            new_tokens = tokens[start:start + size]
            slots = allocator.grow(seq.seq_id, size, new_tokens)
            if slots is None:
                raise _OutOfMemory
            seq.num_computed = end = start + size
            budget -= size
            seq_budget -= 1
            sample = end == len(tokens)
            chunks.append(SeqChunk(
                seq.seq_id, new_tokens, start,
                allocator.block_table(seq.seq_id) if tables else [],
                slots, sample,
                request.beam_width if (sample and group.is_beam) else 0,  # num_logprobs
                request.n if (sample and request.n > 1 and not group.forked) else 1,  # num_samples: on the first sample
                group.request_id, seq.sample_index,
            ))

    # -- preemption --------------------------------------------------------------------------
    def _unschedule(self, group: Group, chunks: list[SeqChunk], counts: BatchCounts) -> tuple[int, int]:
        """Take back a running group's chunks of this step, before it is preempted: drop them from
        ``chunks``, their terms from ``counts`` (the fast path's terms too: the step's sums are
        their total) and the group from the sampled groups, and rewind its sequences to what
        they had computed before the step. Returns the tokens and sequences that frees in the
        step's budgets. Its slots are freed (or swapped) by the preemption that follows."""
        rid = group.request_id
        mine = [c for c in chunks if c.request_id == rid]
        if not mine:
            return 0, 0
        chunks[:] = [c for c in chunks if c.request_id != rid]
        undo = BatchCounts()
        undo.add(mine, self.allocator.block_size)
        for name in (f.name for f in fields(BatchCounts)):
            setattr(counts, name, getattr(counts, name) - getattr(undo, name))
        self.sampled_groups[:] = [g for g in self.sampled_groups if g is not group]
        grown: dict[int, int] = {}
        for c in mine:
            grown[c.seq_id] = grown.get(c.seq_id, 0) + c.query_len
        for seq in group.seqs:
            seq.num_computed -= grown.get(seq.seq_id, 0)
        return sum(c.query_len for c in mine), len(mine)

    def _preempt(self, group: Group) -> None:
        self.sample_holds.release_all(group)
        self.running.remove(group)
        self._preempted_now = True
        self.num_preemptions += 1
        group.num_preemptions += 1
        held = sum(s.num_computed for s in group.seqs)
        # its admissions from now on are re-admissions (vLLM: request.num_preemptions > 0): a
        # prefix cache counts their lookups apart (allocators.prefix_stats)
        for seq in group.seqs + [fork.child for fork in self._pending_forks.get(group.request_id, ())]:
            self.allocator.note_preempted(seq.seq_id)
        group.queued_since = self.now
        if not self.cfg.keep_arrival_order:
            group.order_s = self.now
        # Groups of several sequences are swapped even under `recompute`, as vLLM does; either
        # way they come back with their sharing (see _restore).
        swap = self.cfg.preemption == "swap" or len(group.seqs) > 1
        if swap and self.swap_space.take(held):
            slots = {seq.seq_id: self._slots_of(seq, 0, seq.num_computed) for seq in group.seqs}
            redirect = self._drop_copies_into({s for group_slots in slots.values() for s in group_slots})
            for seq in group.seqs:
                if seq.num_computed:
                    self._swap_out.append(SwapOp(seq.seq_id, [redirect.get(s, s) for s in slots[seq.seq_id]]))
                    self.host_tokens[seq.seq_id] = seq.num_computed
                self.allocator.free(seq.seq_id)
            self.num_swapped_out_slots += held
            group.status = GroupStatus.SWAPPED
            self.swapped.append(group)  # forks not made yet stay pending: their parents come back
        else:
            for seq in group.seqs:
                self.allocator.free(seq.seq_id)
            for fork in self._pending_forks.pop(group.request_id, []):
                group.seqs.append(fork.child)
            for seq in group.seqs:
                seq.num_computed = 0
            group.status = GroupStatus.WAITING
            group.lost_tokens += held
            self.lost_tokens += held
            if self.cfg.keep_arrival_order:
                self.waiting.appendleft(group)
            else:
                self.waiting.append(group)

    def _stuck_alone(self, group: Group) -> bool:
        """Out of memory with no other group running. The first time, the group is preempted and
        comes back with the pool to itself (``exclusive``: it waits for an empty pool and nothing
        joins it until it has a new token), which undoes any fragmentation others left; out of
        memory again before a new token, it can never fit: True."""
        if len(self.running) > 1:
            return False
        progress = sum(s.num_generated for s in group.seqs)
        if group.exclusive and group.alone_oom_at == progress:
            return True
        group.alone_oom_at = progress
        if not group.exclusive:
            self._num_exclusive += 1
            group.exclusive = True
        return False

    def _exclusive_running(self) -> bool:
        """A group brought back with the pool to itself still runs without a new token."""
        if not self._num_exclusive:  # no group anywhere is exclusive: nothing to look at
            return False
        busy = False
        for group in self.running:
            if group.exclusive:
                if sum(s.num_generated for s in group.seqs) > (group.alone_oom_at or 0):
                    group.exclusive = False
                    self._num_exclusive -= 1
                else:
                    busy = True
        return busy

    def _reject_running(self, group: Group) -> None:
        self.sample_holds.release_all(group)
        for seq in group.seqs:
            self.allocator.free(seq.seq_id)
        self.running.remove(group)
        self._reject(group, f"its {group.width} sequences need more than the {self.allocator.num_slots}-slot "
                            f"KV pool even alone")

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

    @property
    def host_used(self) -> int:
        """Slots of swapped-out K/V held in the host pool (its own, or the host tier's)."""
        return self.swap_space.used_slots

    def _release_host(self, group: Group) -> None:
        for seq in group.seqs:
            self.swap_space.give(self.host_tokens.pop(seq.seq_id, 0))

    # -- admission ---------------------------------------------------------------------------
    def _bring_back(self, group: Group, budget: int, seq_budget: int, host: dict[int, int] | None) -> list[SeqChunk] | None:
        """Admit a waiting group (``host`` None) or swap one in and schedule its first chunks;
        None, with nothing changed, when it does not fit now (or was rejected: it never fits)."""
        self._copy_ops.extend(self.allocator.take_copy_ops())  # this step's earlier copies stay
        seqs, forks = list(group.seqs), list(self._pending_forks.get(group.request_id, ()))
        computed = {s.seq_id: s.num_computed for s in seqs}
        swap_mark, copy_mark, swapped_slots = len(self._swap_in), len(self._copy_ops), self.num_swapped_in_slots
        fit, valid = self._restore(group, host)
        if fit is Fit.NEVER:
            if host is not None:
                self.swapped.popleft()
                self._release_host(group)
            self._reject(group, group.reject_reason)
            return None
        if fit is Fit.LATER:
            return None
        chunks: list[SeqChunk] = []
        try:
            self._hold_samples(group)
            self._chunks_for(group, budget, seq_budget, chunks)
        except _OutOfMemory:  # its sequences (or its samples' regions) fit, their next tokens not yet: undo it all
            self.sample_holds.release_all(group)
            for seq in group.seqs:
                self.allocator.free(seq.seq_id)
            self.allocator.take_copy_ops()
            del self._swap_in[swap_mark:], self._copy_ops[copy_mark:]
            self.num_swapped_in_slots = swapped_slots
            group.seqs = seqs
            for seq in seqs:
                seq.num_computed = computed[seq.seq_id]
            if forks:
                self._pending_forks[group.request_id] = forks
            else:
                self._pending_forks.pop(group.request_id, None)
            return None
        if host:  # after the chunks: a copy-on-write they made must not read a slot swapped in now
            self._queue_swap_in(group.seqs, host, valid)
        group.status = GroupStatus.RUNNING
        if group.queued_since is not None:
            group.queue_wait_s += self.now - group.queued_since
            group.queued_since = None
        self._insert_running(group)
        return chunks

    def _hold_samples(self, group: Group) -> None:
        """Without shared blocks a group admits the regions of all its samples or none
        (``kvbench.engine.sample_holds``)."""
        holds = self.sample_holds
        need = holds.needed(group, len(self._pending_forks.get(group.request_id, ())))
        if need and not holds.take(group, need, self.cfg.max_model_len):
            raise _OutOfMemory

    def _restore(self, group: Group, host: dict[int, int] | None) -> tuple[Fit, dict[int, int]]:
        """Admit a group (new, preempted by recompute, or swapped out: ``host`` maps seq_id to the
        tokens held in the host pool) with its sharing, all or nothing; also returns, per
        sequence, how many of its first positions the pool already holds (prefix hits).

        The fork tree's root is admitted with all its tokens; a fork whose point is already in
        the pool is made now (swap-in), any other once its parent has computed that far.
        """
        alloc = self.allocator
        seqs = group.seqs
        if len(seqs) == 1 and not group.seq_finished(seqs[0]):  # what plan_restore makes of one sequence
            tree = ForkTree(seqs[0])
        else:
            if host is None:
                limit = lambda s: len(s.tokens) - 1  # noqa: E731  a sequence computes its last token itself
            else:
                limit = lambda s: host.get(s.seq_id, 0)  # noqa: E731
            tree = plan_restore(seqs, limit, lambda s: not group.seq_finished(s))
        saved = {s.seq_id: s.num_computed for s in group.seqs}
        live: list[Seq] = []
        deferred: list[_PendingFork] = []
        valid: dict[int, int] = {}  # seq_id -> its positions already in the pool (prefix hits)
        fit = self._admit_alone(group, tree.root, live, valid)
        if fit is Fit.OK:
            try:
                fit = self._restore_from(group, tree, tree.root, host or {}, live, deferred, valid)
            except _OutOfMemory:
                fit = Fit.LATER
        if fit is not Fit.OK:
            for seq in live:
                alloc.free(seq.seq_id)
            alloc.take_copy_ops()
            for seq in group.seqs:
                seq.num_computed = saved[seq.seq_id]
            return fit, valid
        group.seqs = live
        if deferred:
            self._pending_forks.setdefault(group.request_id, []).extend(deferred)
        return Fit.OK, valid

    def _admit_alone(self, group: Group, seq: Seq, live: list[Seq], valid: dict[int, int]) -> Fit:
        admission = self.allocator.admit(seq.seq_id, seq.tokens, self.cfg.max_model_len, group.kv_final_len)
        if admission.fit is Fit.NEVER:
            group.reject_reason = admission.reason
        if admission.ok:
            seq.num_computed = valid[seq.seq_id] = admission.num_cached_tokens
            live.append(seq)
        return admission.fit

    def _restore_from(self, group: Group, tree: ForkTree, seq: Seq, host: dict[int, int], live: list[Seq],
                      deferred: list[_PendingFork], valid: dict[int, int]) -> Fit:
        """Bring back ``seq``'s subtree: grow it through its host tokens, forking on the way."""
        for at, child in tree.children.get(seq.seq_id, ()):
            self._grow_to(seq, min(at, host.get(seq.seq_id, 0)))
            if seq.num_computed > at or (not host and seq.num_computed == at):
                # a prefix hit of the root reaches the fork (no swap-in: those positions are cached
                # blocks, written long ago): the child is admitted on its own hits now, since a
                # deferred fork would leave this step with nothing to compute for the group
                fit = self._admit_alone(group, child, live, valid)
                if fit is not Fit.OK:
                    return fit
            elif seq.num_computed == at and host.get(child.seq_id, 0) >= at:
                if not self.allocator.fork(seq.seq_id, child.seq_id, group.kv_final_len):
                    raise _OutOfMemory
                child.num_computed = at
                live.append(child)
            else:
                self._defer(tree, seq, at, child, deferred)
                continue
            fit = self._restore_from(group, tree, child, host, live, deferred, valid)
            if fit is not Fit.OK:
                return fit
        self._grow_to(seq, host.get(seq.seq_id, 0))
        return Fit.OK

    def _defer(self, tree: ForkTree, parent: Seq, at: int, child: Seq, deferred: list[_PendingFork]) -> None:
        deferred.append(_PendingFork(parent, child, at))
        for sub_at, sub in tree.children.get(child.seq_id, ()):
            self._defer(tree, child, sub_at, sub, deferred)

    def _grow_to(self, seq: Seq, stop: int) -> None:
        if stop > seq.num_computed:
            if self.allocator.grow(seq.seq_id, stop - seq.num_computed, seq.tokens[seq.num_computed:stop]) is None:
                raise _OutOfMemory
            seq.num_computed = stop

    def _queue_swap_in(self, seqs: list[Seq], host: dict[int, int], valid: dict[int, int]) -> None:
        """Swap the host tokens of a restored group in, each slot once, parents first, into the
        slots its sequences hold now; drop the copies queued into those slots (the rebuild's
        forks and copy-on-writes: their sources are only written by these swap-ins)."""
        covered: set[int] = set()
        for seq in seqs:
            held, hits = host.get(seq.seq_id, 0), valid.get(seq.seq_id, 0)
            slots = self._slots_of(seq, 0, max(held, hits))
            covered.update(slots[:hits])
            start = next((p for p in range(held) if slots[p] not in covered), held)
            if start == held:
                continue
            self._swap_in.append(SwapOp(seq.seq_id, slots[start:held], offset=start))
            self.num_swapped_in_slots += held - start
            covered.update(slots[start:held])
        for op in self.allocator.take_copy_ops():
            if any(op.dst + i not in covered for i in range(op.length)):
                self._copy_ops.append(op)

    def _insert_running(self, group: Group) -> None:
        key, running = group.age_key, self.running
        idx = len(running)
        while idx > 0 and running[idx - 1].age_key > key:
            idx -= 1
        running.insert(idx, group)

    def _reject(self, group: Group, reason: str) -> None:
        self._pending_forks.pop(group.request_id, None)
        group.status = GroupStatus.REJECTED
        group.reject_reason = reason or "can never fit"

    # -- helpers -----------------------------------------------------------------------------
    def _slots_of(self, seq: Seq, start: int, stop: int) -> list[int]:
        table = self.allocator.block_table(seq.seq_id)
        bs = self.allocator.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]
