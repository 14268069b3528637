"""A recording executor for engine tests: a pool of token ids instead of K/V tensors.

It stores each new token id at its slot, performs copy ops and swaps on that pool, and checks
that every sequence reads back exactly its own tokens through its block table, so the engine
and allocators are tested together without a model. With ``context_seeded`` its samples are a
function of the request, the sample and the tokens read back (as a greedy model's would be), so
a request generates the same tokens alone or under load, preempted or not. With ``window`` (a
sliding-window model) a chunk reads only the positions its first token attends to.
"""
from __future__ import annotations

import dataclasses
import random

from allocators import RESERVE_POLICIES, build
from kvbench.batch import StepBatch, StepResult
from kvbench.engine import Engine, SchedulerConfig
from kvbench.requests import Request


class TokenPoolExecutor:
    needs_block_tables = True

    def __init__(self, num_slots: int, vocab_size: int = 1000, step_s: float = 1.0, seed: int = 0,
                 lookup=None, context_seeded: bool = False, window: int | None = None) -> None:
        self.pool = [None] * num_slots
        self.host: dict[int, list] = {}
        self.rng = random.Random(seed)
        self.vocab_size = vocab_size
        self.step_s = step_s
        self.lookup = lookup  # seq_id -> Seq, to compare the pool with the engine's tokens
        self.batches: list[StepBatch] = []
        self.context_seeded = context_seeded
        self.seed = seed
        self.window = window

    def execute(self, batch: StepBatch) -> StepResult:
        self.batches.append(batch)
        for op in batch.swap_out:
            self.host[op.key] = [self.pool[s] for s in op.slots]
        for op in batch.copy_ops:
            self.pool[op.dst:op.dst + op.length] = self.pool[op.src:op.src + op.length]
        for op in batch.swap_in:
            data = self.host.pop(op.key)
            for i, slot in enumerate(op.slots):
                self.pool[slot] = data[op.offset + i]
        next_tokens, extra, top = {}, {}, {}
        bs = batch.block_size
        for chunk in batch.chunks:
            for token, slot in zip(chunk.token_ids, chunk.slot_mapping):
                self.pool[slot] = token
            for pos, slot in zip(range(chunk.start_pos, chunk.context_len), chunk.slot_mapping):
                table_slot = chunk.block_table[pos // bs] * bs + pos % bs
                assert table_slot == slot, f"seq {chunk.seq_id} pos {pos}: slot {slot} != table {table_slot}"
            oldest = 0 if self.window is None else max(0, chunk.start_pos + 1 - self.window)
            if self.lookup is not None:
                seq = self.lookup(chunk.seq_id)
                seen = [self.pool[chunk.block_table[p // bs] * bs + p % bs] for p in range(oldest, chunk.context_len)]
                assert seen == seq.tokens[oldest:chunk.context_len], f"seq {chunk.seq_id} reads wrong K/V"
            if chunk.sample:
                rng = self.rng
                if self.context_seeded:
                    last = 0 if self.window is None else max(0, chunk.context_len - self.window)  # the sampler's window
                    context = [self.pool[chunk.block_table[p // bs] * bs + p % bs] for p in range(last, chunk.context_len)]
                    rng = random.Random(hash((self.seed, chunk.request_id, chunk.sample_index, tuple(context))))
                next_tokens[chunk.seq_id] = rng.randrange(self.vocab_size)
                if chunk.num_samples > 1:
                    extra[chunk.seq_id] = [rng.randrange(self.vocab_size) for _ in range(chunk.num_samples - 1)]
                if chunk.num_logprobs:
                    tokens = rng.sample(range(self.vocab_size), chunk.num_logprobs)
                    lps = sorted((-rng.random() * 5 for _ in tokens), reverse=True)
                    top[chunk.seq_id] = list(zip(tokens, lps))
        return StepResult(next_tokens, self.step_s, top_logprobs=top, extra_tokens=extra)


def make_requests(specs, vocab_size: int = 1000, seed: int = 0) -> list[Request]:
    """specs: (prompt_len, output_len[, arrival_s[, n[, beam_width]]]) per request; random prompts."""
    rng = random.Random(seed)
    out = []
    for i, spec in enumerate(specs):
        prompt_len, output_len, *rest = spec
        arrival = rest[0] if len(rest) > 0 else 0.0
        n = rest[1] if len(rest) > 1 else 1
        beam = rest[2] if len(rest) > 2 else 1
        out.append(Request(i, [rng.randrange(vocab_size) for _ in range(prompt_len)], output_len, arrival, n, beam))
    return out


def seq_lookup(engine):
    def find(seq_id):
        for group in engine.scheduler.running:
            for seq in group.seqs:
                if seq.seq_id == seq_id:
                    return seq
        raise KeyError(seq_id)
    return find


# -- pressure checks: every request that fits an empty pool alone must finish under load -------
ALLOCATOR_CONFIGS = (
    [("contiguous", {"reserve": r}) for r in RESERVE_POLICIES]
    + [("buddy", {"reserve": r}) for r in RESERVE_POLICIES]
    + [("paged", {"block_size": 1}), ("paged", {"block_size": 4}), ("paged_prefix", {"block_size": 4}),
       ("radix", {"block_size": 4}), ("vattention", {"block_size": 4, "page_bytes": 64, "token_bytes": 4})]
)
FRACTIONS = ["mem_token_frac", "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac"]


def checked_run(name: str, knobs: dict, num_slots: int, requests: list[Request], *, max_model_len: int = 64,
                block_size: int = 4, max_steps: int = 20000, vocab_size: int = 1000, **cfg):
    """Run on the token pool (every sequence reads back its own tokens, allocator invariants on)
    and check what holds for any run: every request ends finished or rejected with a reason,
    finished ones hold all their outputs (with ``stop_token_ids``: each as long as the output or
    ending at its first stop token), the memory fractions of every step sum to 1."""
    knobs = dict(knobs)
    if name in ("contiguous", "buddy"):
        knobs.setdefault("max_model_len", max_model_len)
    knobs.setdefault("block_size", block_size)
    allocator = build(name, num_slots, debug=True, **knobs)
    executor = TokenPoolExecutor(num_slots, vocab_size=vocab_size, context_seeded=True)
    engine = Engine(allocator, executor, SchedulerConfig(max_model_len=max_model_len, **cfg), max_steps=max_steps)
    executor.lookup = seq_lookup(engine)
    out = engine.run(requests)
    assert out.summary["num_finished"] + out.summary["num_rejected"] == len(requests)
    status = out.requests.set_index("request_id")
    for request in requests:
        row = status.loc[request.request_id]
        if row["status"] == "finished":
            samples = out.outputs[request.request_id]
            assert len(samples) == max(request.n, request.beam_width)
            stops = set(cfg.get("stop_token_ids", ()))
            for s in samples:
                first_stop = next((i for i, tok in enumerate(s) if tok in stops), None)
                if first_stop is None or request.beam_width > 1:  # beams ignore stop tokens
                    assert len(s) == request.output_len
                else:
                    assert len(s) == first_stop + 1
        else:
            assert row["status"] == "rejected" and row["reason"]
    if len(out.steps):
        assert (out.steps[FRACTIONS].fillna(0.0).sum(axis=1) - 1).abs().max() < 1e-9
    assert not allocator.live_sequences()
    return out


def fits_alone(name: str, knobs: dict, num_slots: int, request: Request, **kw) -> bool:
    """Whether the request finishes alone in an empty pool under the same configuration."""
    alone = dataclasses.replace(request, arrival_s=0.0, prompt_ids=list(request.prompt_ids))
    out = checked_run(name, knobs, num_slots, [alone], **kw)
    return out.summary["num_finished"] == 1


def lost_requests(name: str, knobs: dict, num_slots: int, requests: list[Request], **kw) -> list[int]:
    """Requests that fit alone yet were rejected under load (the pressure invariant: none)."""
    out = checked_run(name, knobs, num_slots, requests, **kw)
    status = out.requests.set_index("request_id")["status"]
    return [r.request_id for r in requests
            if status.loc[r.request_id] != "finished" and fits_alone(name, knobs, num_slots, r, **kw)]
