"""Decode runs: the steps in which nothing happens but one token per running sequence, at once.

Between two events (an arrival, the pool running short, a group to admit) every step of a
continuous-batching engine is the same: each running sequence decodes one token. On the
simulator with ``paged``, ``paged_prefix`` (no tiers), ``radix`` or a region allocator (contiguous, buddy)
such a run of steps is computed here at once. The running sequences' computed tokens and final
lengths are arrays (``RunState``, kept from run to run, and held over a general step that sets
them aside or decodes each one token, with the groups it admitted inserted); the sums the run
books read (``allocators.run_sums.RunSums``: context, blocks, a histogram of positions in last
blocks, final-block waste by round) move with rounds, drops and insertions, and from those sums
the step times and the memory breakdown of each step follow step by step (a run is a few
steps: per-step sums beat numpy's per-call cost). The
per-sequence work (tokens, emission times, block tables) is done once per run, not once per
step. ``paged_prefix`` hashes
the blocks a run fills round by round, between the grows that may evict cached blocks, as each
step's commit would; ``radix`` inserts nothing while sequences decode (its running inserts stop
at the prompt), so its rounds are paged's grows, evictions included. The cost model and the step log still see
every step, with the numbers the general path would give: the identity suite
(``tests/sim_identity.py``) and ``tests/test_decode_runs.py`` hold both paths to the same bits.

A run starts only where the general path would make that step a plain decode of every running
group (one sequence each, one token to compute), with nothing swapped, no fork pending, no
exclusive group, FCFS order, ``mixed`` or ``prompt_first`` scheduling, no stop tokens, and a
waiting head (if any) that the pool cannot take; it stops before the first step that could
differ: the first with too few free blocks for its grows, the first that starts at or after the
next arrival, after ``MAX_RUN_STEPS``, and after the step in which sequences finish (which the
run finishes as ``Engine._process`` would). With ``paged``, ``paged_prefix`` or ``radix``, victim
``newest`` and recompute, the step short of blocks is taken too, preemptions and finishes included.
"""
from __future__ import annotations

import bisect
import math
import time
from array import array
from itertools import accumulate, compress

from allocators.buddy import BuddyAllocator
from allocators.contiguous import ContiguousAllocator
from allocators.paged import PagedAllocator
from allocators.paged_prefix import PagedPrefixAllocator
from allocators.radix import RadixAllocator
from allocators.run_sums import RunSums
from kvbench.engine.policies import PromptFirstScheduler
from kvbench.engine.scheduler import Scheduler
from kvbench.engine.sequence import GroupStatus
from kvbench.engine.victims import NewestVictim

PAGED_RUN_ALLOCATORS = (PagedAllocator, PagedPrefixAllocator, RadixAllocator)  # decode_run_* books, short steps
RUN_ALLOCATORS = (*PAGED_RUN_ALLOCATORS, ContiguousAllocator, BuddyAllocator)
MAX_RUN_STEPS = 128  # bounds a run's per-step lists; a longer stretch is several runs
# below this many, gathering the state afresh costs less than checking a held one after a step
# that decoded them (measured: 35 us against 12 us at 7 sequences; 200 us gathered at 190)
RESUME_MIN_SEQS = 64


class DecodeRuns:
    """Advances an engine through decode runs; ``for_engine`` gives None where none can occur."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.sched = engine.scheduler
        self.alloc = engine.allocator  # paged or a region allocator: their decode_run_* books
        self.executor = engine.executor  # the simulator's: decode_run_times, draw_tokens
        self.steps_fast = 0  # steps taken by runs and short steps, not the general path (the decode-path census)
        self.runs = 0
        # paper-era vLLM: each step first tries the waiting prompts alone, then decodes without admitting
        self.prompt_first = isinstance(self.sched, PromptFirstScheduler)
        # a step short of blocks preempts as the general path does for these (kvbench.engine.victims)
        self.preempts_newest = (type(self.alloc) in PAGED_RUN_ALLOCATORS
                                and type(self.sched.victims) is NewestVictim
                                and self.sched.cfg.preemption == "recompute")
        self.state: RunState | None = None  # the running sequences as the last run left them

    def hold(self) -> RunState | None:
        """Called before a general step: it may change any sequence, so the next run gathers
        afresh unless ``resume`` gets back the state returned here."""
        state, self.state = self.state, None
        return state

    def resume(self, state: RunState) -> None:
        """After a general step, ``state`` holds again where that step left its sequences as a
        run would: set aside (a prompt-only step, ``Scheduler.prompt_step``), or each computed
        its one token, those done finished, those preempted gone; the groups the step admitted
        join at their running places if each is one plain decoding sequence, and the allocator
        is ready for runs. Else the next run gathers afresh."""
        sched = self.sched
        if not sched.prompt_step:
            if len(state.groups) < RESUME_MIN_SEQS:
                return
            left = [g.status is GroupStatus.RUNNING or g.status is GroupStatus.FINISHED for g in state.groups]
            if not all(left):  # preempted (or rejected) in the step: their sequences are out of the pool
                state.keep(left)
            if [s.num_computed for s in state.seqs] != [t + 1 for t in state.sums.tokens_now()]:
                return  # not every one computed exactly its token
            state.advance(1)
            if [g.status is GroupStatus.FINISHED for g in state.groups] != state.finished():
                return
            state.drop_finished()
        running = sched.running
        new_at = self._admitted_at(state)
        if new_at is None:  # a held group left (preempted): gather afresh
            return
        if new_at:
            admitted = [running[i] for i in new_at]
            seqs = RunState.plain_seqs(admitted)
            if seqs is None:
                return
            state.insert(new_at, admitted, seqs)
        if self.alloc.decode_run_ready(len(running)):
            self.state = state

    def _admitted_at(self, state: RunState) -> list[int] | None:
        """The running places of the groups ``state`` does not hold, the held ones all still
        running in their order; None where one of those left."""
        old = state.groups
        new_at, j = [], 0
        for i, group in enumerate(self.sched.running):
            if j < len(old) and group is old[j]:
                j += 1
            else:
                new_at.append(i)
        return new_at if j == len(old) else None

    def prompt_step_books(self, state: RunState) -> tuple[int, int, object] | None:
        """For a prompt-only step (the held groups set aside, untouched), after its scheduling:
        the live sequences' computed tokens and blocks holding them (no sharing) and the
        allocator's usage, from the held state's sums and the admitted groups' sequences; None
        where the allocator cannot say so (then the engine's pass over every sequence)."""
        new_at = self._admitted_at(state)
        run_usage = getattr(self.alloc, "run_usage", None)
        if new_at is None or run_usage is None or self.sched.sample_holds.final_lens():
            return None
        running, bs = self.sched.running, self.alloc.block_size
        finals = {}
        logical = seq_blocks = 0
        for i in new_at:
            group = running[i]
            for seq in group.seqs:
                finals[seq.seq_id] = group.kv_final_len
                logical += seq.num_computed
                seq_blocks += -(-seq.num_computed // bs)
        usage = run_usage(state.sums, finals)
        if usage is None:
            return None
        return state.sums.context + logical, state.sums.blocks + seq_blocks, usage

    @classmethod
    def for_engine(cls, engine) -> DecodeRuns | None:
        sched, alloc = engine.scheduler, engine.allocator
        plain = (type(alloc) in RUN_ALLOCATORS and not alloc.debug
                 and hasattr(engine.executor, "draw_tokens")
                 and type(sched) in (Scheduler, PromptFirstScheduler) and not sched.order.reorders
                 and not engine.cfg.stop_token_ids and not engine.memmap_every and engine.tiers is None and engine.load_cost is None
                 and not engine.tier_copies and engine.max_concurrency is None)
        return cls(engine) if plain else None

    def advance(self, now: float, next_arrival_s: float, step: int, recorder, finished: int,
                steps_left: int | None) -> tuple[int, float, int]:
        """Run as many plain-decode steps as provably match the general path, from ``now`` (the
        engine's clock at the step boundary, arrivals up to it added); records them. Returns the
        steps taken (0: the general path takes this step), the clock after them and the groups
        that finished (in the last step; their next turns wait in ``engine._released``)."""
        sched, alloc = self.sched, self.alloc
        running = sched.running
        n = len(running)
        cfg = sched.cfg
        if not n or sched.swapped or sched.pending_forks or sched._num_exclusive \
                or n > cfg.max_num_batched_tokens or n > cfg.max_num_seqs:
            return 0, now, 0
        if not self._head_waits(n, n):  # the head is admitted even if every sequence takes a block first
            return 0, now, 0
        state = self.state
        if state is None or running != state.groups:  # == compares the groups by identity
            state = self.state = RunState.gather(running, alloc)
            if state is None:
                return 0, now, 0
        if sched.sample_holds.final_lens():
            return 0, now, 0
        seqs, sums = state.seqs, state.sums
        left = state.left
        steps = left  # the last step may be one in which sequences finish
        if steps_left is not None:
            steps = min(steps, steps_left)
        steps = min(steps, MAX_RUN_STEPS)
        bs = alloc.block_size
        context0, blocks0 = sums.context, sums.blocks
        executor = self.executor
        if next_arrival_s < math.inf:  # no step past the arrival: a step takes at least the first's time
            first_s = executor.decode_run_times(n, [context0], [blocks0], bs)["duration_s"][0]
            if first_s > 0:
                steps = min(steps, int((next_arrival_s - now) / first_s) + 2)
        wanted = steps
        steps, first_taken = alloc.decode_run_room(sums, steps)
        # the step that runs short of blocks comes last, with its preemptions and finishes
        short = self.preempts_newest and steps < wanted and steps < left
        if not (steps > 0 or short) or not self._head_waits(first_taken, n):
            return 0, now, 0
        if steps == 0:
            taken = self._short_step(now, step, recorder, finished)
            if taken is None:
                return 0, now, 0
            self.steps_fast += 1
            return 1, *taken
        t0 = time.perf_counter()
        pairs = [context0 + n * j for j in range(1, steps + 1)]  # context tokens read in each step
        blocks_read = [blocks0 + taken for taken in sums.takes(steps)]  # a block more as each one starts
        times = executor.decode_run_times(n, pairs, blocks_read, bs)
        clock = list(accumulate(times["duration_s"], initial=now))  # now += duration, step by step
        # an arrival joins at the first boundary at or after it: the general path takes that step
        done = bisect.bisect_left(clock, next_arrival_s, 1, steps)
        starts, now, ends = clock[:done], clock[done], clock[1:done + 1]
        if done < steps:
            times = {key: values[:done] for key, values in times.items()}
        books = alloc.decode_run_books(sums, done)
        drawn_tokens = executor.draw_tokens(n * done)  # step by step, in chunk order
        emitted = array("d", ends)
        for i, seq in enumerate(seqs):
            seq.tokens.extend(drawn_tokens[i::n])
            seq.num_computed += done
            seq.num_generated += done
            seq.token_times.extend(emitted)
        alloc.grow_decode_run(sums, done, state.token_lists)
        state.advance(done)
        sched.now = starts[-1]
        sched.sampled_groups = list(running)
        sched.plain_decodes = n
        engine = self.engine
        num_running = [n] * done
        ended = self._finish_last(now, num_running) if done == left else 0
        recorder.decode_run(first_index=step, starts=starts, times=times, num_seqs=n, pairs=pairs, books=books,
                            num_running=num_running, num_waiting=[len(sched.waiting)] * done,
                            num_preemptions=[sched.num_preemptions] * done, schedule_s=(time.perf_counter() - t0) / done)
        progress = engine.progress
        if progress is not None:
            for j, end in enumerate(ends):
                progress(finished + (ended if j == done - 1 else 0), end)
        if short and done == steps and now < next_arrival_s:
            taken = self._short_step(now, step + done, recorder, finished)
            if taken is not None:
                done, now, ended = done + 1, taken[0], taken[1]
        self.steps_fast += done
        self.runs += 1
        return done, now, ended

    def _finish_last(self, now: float, num_running: list[int]) -> int:
        """The last step's finishers, as ``Engine._process`` finishes them (in chunk order, at
        ``now``); the step log's last running count is after them, its block counts before them (as
        the general path takes them, after scheduling). Returns how many."""
        state, engine = self.state, self.engine
        ended = list(compress(zip(state.groups, state.seqs), state.finished()))
        for group, seq in ended:
            engine._finish(group, seq.tokens, now)
        state.drop_finished()
        num_running[-1] = len(self.sched.running)
        return len(ended)

    def _short_step(self, now: float, index: int, recorder, finished: int) -> tuple[float, int] | None:
        """The step whose grows run out of blocks, as the scheduler takes it (victim ``newest``,
        recompute): one-token grows in running order; with the pool empty the newest running group
        is preempted, the grower itself when it is the newest, and the grow retried; then the
        groups done finish. Returns the clock after it and the groups that finished; None,
        changing nothing, where a group would be out of memory alone (the general path's
        exclusive rule)."""
        sched, alloc, state = self.sched, self.alloc, self.state  # the state: advance's, just checked
        running = sched.running
        if type(alloc) is not PagedAllocator:  # paged's runs hold no shared block
            per_table, distinct = alloc.run_block_counts(state.sums)
            if per_table != distinct:  # prefix hits shared: a preemption may free fewer blocks than it holds
                return None
        mask, shift = alloc.block_size - 1, alloc.block_size.bit_length() - 1
        computed = state.sums.tokens_now()
        growers = [i for i, nt in enumerate(computed) if not nt & mask]  # the others grow into their last block
        free, last = alloc.num_free_blocks(), len(running) - 1
        for i in growers:  # a dry run: who is preempted, and never a group alone
            if i > last:
                break
            while not free:
                if last == 0:
                    return None
                last -= 1
                if last + 1 == i:
                    break  # the grower was the newest: preempted itself
                free += (computed[last + 1] + mask) >> shift
            else:
                free -= 1
        t0 = time.perf_counter()
        sched.now = now
        if type(alloc) is PagedAllocator:
            # its free list is first in, first out: preempting the victims (newest first) before
            # the grows hands each grower the block it would take between the preemptions
            while len(running) > last + 1:
                sched._preempt(running[-1])
            n = len(running)
            state.keep_first(n)
            alloc.grow_decode_run(state.sums, 1, state.token_lists)
        else:
            grows = [(s.seq_id, s.tokens[-1:]) for s in state.seqs]
            i = 0
            while True:  # grow_many stops at the first grow the pool cannot take: preempt, go on
                i += len(alloc.grow_many(grows[i:len(running)]))
                if i >= len(running):
                    break
                sched._preempt(running[-1])
            n = len(running)
            state.keep_first(n)  # the preempted groups were the newest
        seqs = state.seqs
        sums = state.sums
        pairs, blocks_read = sums.context + n, sums.blocks + sums.takes(1)[0]
        times = self.executor.decode_run_times(n, [pairs], [blocks_read], alloc.block_size)
        after = now + times["duration_s"][0]
        books = alloc.decode_run_books(sums, 1, grown=True)
        state.advance(1)
        alloc.commit()  # after the step's forward pass on the general path: nothing in between reads the pool
        for seq, token in zip(seqs, self.executor.draw_tokens(n)):
            seq.tokens.append(token)
            seq.num_computed += 1
            seq.num_generated += 1
            seq.token_times.append(after)
        sched.sampled_groups = list(running)
        sched.plain_decodes = n
        num_running = [n]
        ended = self._finish_last(after, num_running) if state.left <= 0 else 0
        recorder.decode_run(first_index=index, starts=[now], times=times,
                            num_seqs=n, pairs=[pairs], books=books, num_running=num_running,
                            num_waiting=[len(sched.waiting)], num_preemptions=[sched.num_preemptions],
                            schedule_s=time.perf_counter() - t0)
        if self.engine.progress is not None:
            self.engine.progress(finished + ended, after)
        return after, ended

    def _head_waits(self, taken: int, n: int) -> bool:
        """Whether the steps of a run leave the waiting queue as it is: no group is tried, or the
        head is, and ``admit`` answers LATER and changes nothing once the first step has taken
        ``taken`` blocks (later steps leave less room)."""
        sched = self.sched
        cfg = sched.cfg
        budget, seq_budget = cfg.max_num_batched_tokens - n, cfg.max_num_seqs - n
        if self.prompt_first:  # tried before the step's grows, with the running sequences set aside
            budget, taken = cfg.max_num_batched_tokens, 0
        if not sched.waiting or budget <= 0 or seq_budget <= 0:
            return True
        head = sched.waiting[0]
        if not sched._may_chunk(head) and sum(s.pending for s in head.seqs) > budget:
            return True  # the scheduler stops before trying it
        if len(head.seqs) != 1 or head.seq_finished(head.seqs[0]):
            return False
        seq = head.seqs[0]
        return self.alloc.admit_waits(seq.seq_id, seq.tokens, cfg.max_model_len, head.kv_final_len, taken)


class RunState:
    """The running sequences of a run, kept from one run to the next while no general step
    intervenes: their groups (in running order), sequences and token lists, their ids, computed
    tokens and final lengths with the sums the run books read (``RunSums``), and tokens left to
    generate. ``gather`` checks what a run needs once; a run keeps every property it checked (one
    token to compute each, no shared partial block, the allocator's readiness), so the next run
    with the same groups need not check again."""

    __slots__ = ("groups", "seqs", "token_lists", "sums", "to_generate", "since", "left")

    def __init__(self, groups, seqs, sums: RunSums, to_generate: list[int]) -> None:
        self.groups = groups
        self.seqs = seqs
        self.token_lists = [s.tokens for s in seqs]
        self.sums = sums
        self.to_generate = to_generate  # as gathered: less ``since`` now
        self.since = 0  # steps run since the gather
        self.left = min(to_generate)  # the fewest tokens any of them has left to generate

    @staticmethod
    def plain_seqs(groups) -> list | None:
        """The groups' sequences if every group is one plain decoding sequence with one token to
        compute; else None."""
        seqs = [g.seqs[0] for g in groups if len(g.seqs) == 1 and g.forked and not g.is_beam]
        if len(seqs) != len(groups) or any([len(s.tokens) - s.num_computed != 1 for s in seqs]):
            return None
        return seqs

    @classmethod
    def gather(cls, running, alloc) -> RunState | None:
        """The state of ``running`` if every group is one plain decoding sequence with one token to
        compute and the allocator is ready for runs; else None."""
        seqs = cls.plain_seqs(running)
        if seqs is None or not alloc.decode_run_ready(len(running)):
            return None
        sums = RunSums([s.seq_id for s in seqs], [s.num_computed for s in seqs], [g.kv_final_len for g in running],
                       alloc.block_size)
        return cls(list(running), seqs, sums, [g.output_len - s.num_generated for g, s in zip(running, seqs)])

    def insert(self, at: list[int], groups, seqs) -> None:
        """Add ``groups`` (plain decoding, ``seqs`` their sequences) at running places ``at``, ascending."""
        since = self.since
        for i, group, seq in zip(at, groups, seqs):
            self.groups.insert(i, group)
            self.seqs.insert(i, seq)
            self.token_lists.insert(i, seq.tokens)
            self.to_generate.insert(i, group.output_len - seq.num_generated + since)
        self.sums.insert(at, [s.seq_id for s in seqs], [s.num_computed for s in seqs], [g.kv_final_len for g in groups])
        self.left = min(self.to_generate) - since

    def advance(self, steps: int) -> None:
        """Every sequence computed and generated ``steps`` more tokens."""
        self.sums.advance(steps)
        self.since += steps
        self.left -= steps

    def keep_first(self, n: int) -> None:
        """Forget all but the first ``n`` sequences (the others were preempted)."""
        if n < len(self.seqs):
            for name in ("groups", "seqs", "token_lists", "to_generate"):
                del getattr(self, name)[n:]
            self.sums.keep_first(n)
            self.left = min(self.to_generate) - self.since

    def finished(self) -> list[bool]:
        """Whether each sequence has generated its last token."""
        since = self.since
        return [k <= since for k in self.to_generate]

    def drop_finished(self) -> None:
        """Forget the sequences that generated their last token, keeping the order."""
        self.keep([k > self.since for k in self.to_generate])

    def keep(self, keep: list[bool]) -> None:
        """Keep the sequences marked True, in order."""
        self.groups, self.seqs, self.token_lists, self.to_generate = (
            list(compress(items, keep)) for items in (self.groups, self.seqs, self.token_lists, self.to_generate))
        self.sums.keep(keep)
        self.left = min(self.to_generate) - self.since if self.to_generate else 0
