"""A recording executor for engine tests: a pool of token ids instead of K/V tensors.

It stores each new token id at its slot, performs copy ops and swaps on that pool, and checks
that every sequence reads back exactly its own tokens through its block table, so the engine
and allocators are tested together without a model.
"""
from __future__ import annotations

import random

from kvbench.batch import StepBatch, StepResult
from kvbench.requests import Request


class TokenPoolExecutor:
    needs_block_tables = True

    def __init__(self, num_slots: int, vocab_size: int = 1000, step_s: float = 1.0, seed: int = 0,
                 lookup=None) -> None:
        self.pool = [None] * num_slots
        self.host: dict[int, list] = {}
        self.rng = random.Random(seed)
        self.vocab_size = vocab_size
        self.step_s = step_s
        self.lookup = lookup  # seq_id -> Seq, to compare the pool with the engine's tokens
        self.batches: list[StepBatch] = []

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
            if self.lookup is not None:
                seq = self.lookup(chunk.seq_id)
                seen = [self.pool[chunk.block_table[p // bs] * bs + p % bs] for p in range(chunk.context_len)]
                assert seen == seq.tokens[:chunk.context_len], f"seq {chunk.seq_id} reads wrong K/V"
            if chunk.sample:
                next_tokens[chunk.seq_id] = self.rng.randrange(self.vocab_size)
                if chunk.num_samples > 1:
                    extra[chunk.seq_id] = [self.rng.randrange(self.vocab_size) for _ in range(chunk.num_samples - 1)]
                if chunk.num_logprobs:
                    tokens = self.rng.sample(range(self.vocab_size), chunk.num_logprobs)
                    lps = sorted((-self.rng.random() * 5 for _ in tokens), reverse=True)
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
