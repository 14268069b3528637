"""The Mooncake traces (Kimi, FAST 2025): arrivals, lengths and the prompt's block hashes.

One JSON object a line: ``timestamp`` (ms), ``input_length``, ``output_length`` (tokens) and
``hash_ids``, one id per 512-token block of the prompt (the last block may be partial); equal
ids at the same position mean the same block of prompt text. Token ids are not published.

Hash to tokens. Every distinct (position, hash_id) pair of the window gets one fixed block of
512 token ids (seeded, random), and a prompt is its blocks' ids cut to its length. So two
requests share exactly the blocks of their common leading hash ids, and any prefix cache sees
the reuse the trace records at any block size; the first id of each block is distinct among
the blocks at its position (while they number fewer than the vocabulary), so a radix tree's
match stops exactly at the first differing trace block. Sharing finer than 512 tokens is
unknown: with a block size below 512 a cache still reuses only whole trace blocks (a
different trace block shares no token with another, even if the real texts began alike).

Reuse ceiling (``trace_reuse_ceiling``): the share of prompt tokens an infinite cache would hit,
counted as the caches count hits (a prompt of P tokens can hit at most P - 1): for each request
in arrival order, the tokens of its leading trace blocks whose whole prefix of hash ids some
earlier request of the stream had, over the sum of P - 1. Measured hit rates at block size b
can only be lower (eviction, a block not yet computed when its reuser arrives, whole-b blocks).

Requests longer than the model (prompt + output > max_model_len) are dropped (``overlong:
refuse``, counted) or cut (``overlong: clip``: the output first, then the prompt's tail, so its
leading blocks keep their ids); all too long is an error.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .azure import OVERLONG, fit_to_context
from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError, rng_for
from .traces import (REPLAY_DEFAULTS, Window, check_lengths, open_trace_text, read_jsonl, record_numbers,
                     replay_meta)

TRACE_BLOCK = 512  # tokens per hash id in the Mooncake traces
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
DEFAULTS: dict[str, Any] = {**REPLAY_DEFAULTS, "overlong": "refuse"}
SHIPPED = {"mooncake_conversation": "mooncake_conversation.jsonl.gz",
           "mooncake_synthetic": "mooncake_synthetic.jsonl.gz"}


def check_hashes(name: str, records: list[dict[str, Any]]) -> None:
    for i, rec in enumerate(records):
        ids, length = rec["hash_ids"], rec["input_length"]
        if (not isinstance(ids, list) or not isinstance(length, int) or isinstance(length, bool) or length < 1
                or len(ids) != -(-length // TRACE_BLOCK) or not all(isinstance(h, int) for h in ids)):
            raise WorkloadError(f"{name}: record {i} has {len(ids) if isinstance(ids, list) else ids!r} hash ids for "
                                f"input_length {length!r}; expected one integer per {TRACE_BLOCK}-token block")


class BlockTokens:
    """The fixed token ids of each (position, hash_id) block; see the module docstring."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        self.rng = rng_for(seed, "mooncake_blocks")
        self.vocab_size = vocab_size
        self.vocab = list(range(vocab_size))  # one int object per id, shared by every prompt
        self.blocks: dict[tuple[int, int], tuple[int, ...]] = {}
        self.per_position: dict[int, int] = {}

    def block(self, position: int, hash_id: int) -> tuple[int, ...]:
        key = (position, hash_id)
        found = self.blocks.get(key)
        if found is None:
            ids = self.rng.integers(0, self.vocab_size, size=TRACE_BLOCK)
            rank = self.per_position.get(position, 0)
            self.per_position[position] = rank + 1
            ids[0] = rank % self.vocab_size  # distinct first ids at one position
            found = self.blocks[key] = operator.itemgetter(*ids.tolist())(self.vocab)
        return found

    def prompt(self, hash_ids: list[int], length: int) -> list[int]:
        out: list[int] = []
        for position, hash_id in enumerate(hash_ids[:-(-length // TRACE_BLOCK)]):
            out.extend(self.block(position, hash_id))
        del out[length:]
        return out


def reuse_ceiling(hash_lists: list[list[int]], prompt_lens: list[int]) -> float | None:
    """The share of prompt tokens (bar each prompt's last) an infinite prefix cache would hit."""
    seen: set[int] = set()  # chained keys of every prefix of hash ids an earlier request had
    hit = total = 0
    for ids, length in zip(hash_lists, prompt_lens):
        matched, key, missed = 0, 0, False
        for hash_id in ids[:-(-length // TRACE_BLOCK)]:
            key = hash((key, hash_id))
            if not missed and key in seen:
                matched += 1
            else:
                missed = True
                seen.add(key)
        hit += min(matched * TRACE_BLOCK, length - 1)
        total += length - 1
    return hit / total if total else None


def make_builder(config_name: str) -> Callable[[Knobs, CommonKnobs, int | None, ModelLimits], PromptSet]:
    def build(knobs: Knobs, common: CommonKnobs, count: int | None, limits: ModelLimits) -> PromptSet:
        window = Window.parse(knobs)
        policy = knobs.get_choice("overlong", OVERLONG)
        text, name = open_trace_text(knobs.get_str("path", optional=True), SHIPPED[config_name])
        records = read_jsonl(text, name, KEYS)
        check_hashes(name, records)
        times = record_numbers(name, records, "timestamp") / 1000.0
        picked, arrivals, scale = window.select(times, name)
        chosen = [records[i] for i in picked]
        prompt_raw = record_numbers(name, chosen, "input_length")
        output_raw = record_numbers(name, chosen, "output_length")
        check_lengths(name, prompt_raw, output_raw, records=picked)
        keep, prompt_lens, output_lens, fit = fit_to_context(config_name, policy, prompt_raw.astype(np.int64),
                                                             output_raw.astype(np.int64), limits.max_model_len)
        arrivals, scale = window.rescale(arrivals, scale, keep)
        hashes = [records[picked[k]]["hash_ids"] for k in keep]
        tokens = BlockTokens(common.seed, limits.vocab_size)
        prompts = [tokens.prompt(ids, int(length)) for ids, length in zip(hashes, prompt_lens)]
        meta = {**replay_meta(name, f"trace:{SHIPPED[config_name]}", window, scale, arrivals[keep],
                              times[picked], len(records)),
                **fit, "length_tokenizer": "the trace's own (Kimi's, unknown)",
                "prompt_ids": f"synthetic, one fixed block per (position, hash_id) of {TRACE_BLOCK} tokens",
                "trace_block_tokens": TRACE_BLOCK, "trace_unique_blocks": len(tokens.blocks),
                "trace_reuse_ceiling": reuse_ceiling(hashes, prompt_lens.tolist())}
        return PromptSet(config_name, prompts, output_lens.tolist(), meta, arrivals=arrivals[keep].tolist())

    return build
