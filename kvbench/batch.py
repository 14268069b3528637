"""The one record the scheduler hands an executor each step, and what comes back.

The executor sees block tables and slot mappings, never an allocator object.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from allocators.base import CopyOp


class SeqChunk(NamedTuple):
    """The new tokens of one sequence in this step (a prefill chunk or one decode token).

    A named tuple, immutable: the decode fast path builds one per sequence per step, and
    ``tuple.__new__(SeqChunk, fields)`` costs a fraction of a class's ``__init__``."""

    seq_id: int
    token_ids: list[int]  # the tokens whose K/V this step computes
    start_pos: int  # position of token_ids[0] in the sequence
    block_table: list[int]  # block ids covering positions [0, start_pos + len(token_ids))
    slot_mapping: list[int]  # pool slot of each new token
    sample: bool  # True when the step must return a next token for this sequence
    num_logprobs: int = 0  # > 0: return the top-k (token, logprob) candidates (beam search)
    num_samples: int = 1  # > 1: also return num_samples - 1 independent extra samples (parallel sampling)
    request_id: int = -1
    sample_index: int = 0  # which of the request's parallel samples / beams this is

    @property
    def query_len(self) -> int:
        return len(self.token_ids)

    @property
    def context_len(self) -> int:
        return self.start_pos + len(self.token_ids)


@dataclass(slots=True)
class BatchCounts:
    """Sums over a batch's chunks, kept by the scheduler as it adds them, so that the recorder and
    the cost model need no pass over the chunks. ``add`` is the definition; a decode fast path may
    add a one-token chunk's terms directly."""

    num_tokens: int = 0
    num_requests: int = 0  # distinct requests (a request's chunks are added together, once per step)
    num_sampled: int = 0  # chunks with sample=True
    num_draws: int = 0  # tokens drawn: num_samples of each sampling chunk
    num_ranked: int = 0  # sampling chunks that ask for top-k candidates (num_logprobs > 0: beams)
    prefill_tokens: int = 0  # tokens of chunks of more than one token or that do not sample
    prefill_pairs: int = 0  # causal (query, key) pairs of chunks of more than one token
    prefill_blocks: int = 0  # blocks those chunks read
    decode_pairs: int = 0  # context lengths of one-token chunks
    decode_blocks: int = 0  # blocks those chunks read

    def add(self, chunks: list[SeqChunk], block_size: int) -> None:
        """One request's chunks of this step."""
        self.num_requests += 1
        for c in chunks:
            q = len(c.token_ids)
            ctx = c.start_pos + q
            self.num_tokens += q
            if c.sample:
                self.num_sampled += 1
                self.num_draws += c.num_samples
                if c.num_logprobs > 0:
                    self.num_ranked += 1
            if q > 1 or not c.sample:
                self.prefill_tokens += q
            if q == 1:
                self.decode_pairs += ctx
                self.decode_blocks += -(-ctx // block_size)
            elif q:
                self.prefill_pairs += q * c.start_pos + q * (q + 1) // 2
                self.prefill_blocks += -(-ctx // block_size)


@dataclass(slots=True)
class SwapOp:
    """Move a sequence's K/V between the device pool and the host pool (in token order)."""

    key: int  # host-pool key (the sequence id)
    slots: list[int]  # device slots, in token order
    offset: int = 0  # position of slots[0] in the sequence (swap-in skips prefix-cached tokens)


@dataclass(slots=True)
class StepBatch:
    chunks: list[SeqChunk]
    block_size: int
    copy_ops: list[CopyOp] = field(default_factory=list)  # in-pool copies, done before the forward
    swap_out: list[SwapOp] = field(default_factory=list)  # device -> host, before copy_ops
    swap_in: list[SwapOp] = field(default_factory=list)  # host -> device, before the forward
    tier_copies: list = field(default_factory=list)  # allocators.tiers.TierCopy: host tier stores, loads, drops (hf)
    page_maps: int = 0  # physical page groups mapped since the last step (vattention)
    page_unmaps: int = 0  # and unmapped
    counts: BatchCounts | None = None  # sums over chunks, when the scheduler kept them (else computed)
    # seq_id -> each attention group's block table (then each state group's block), for an allocator whose
    # layer groups keep separate tables (``per_group_tables``); None otherwise (the chunks' tables say all)
    group_tables: dict[int, list[list[int]]] | None = None

    @property
    def num_tokens(self) -> int:
        if self.counts is not None:
            return self.counts.num_tokens
        return sum(len(c.token_ids) for c in self.chunks)


@dataclass(slots=True)
class StepResult:
    next_tokens: dict[int, int]  # seq_id -> sampled token, for every chunk with sample=True
    duration_s: float  # wall (hf) or modelled (sim) time of the whole step
    top_logprobs: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # beam search
    extra_tokens: dict[int, list[int]] = field(default_factory=dict)  # seq_id -> num_samples - 1 more samples
    timings: dict[str, float] = field(default_factory=dict)  # attention_s, forward_s, sampling_s, copy_s, swap_s
