"""Shared prefix: one common prompt of ``prefix_len`` tokens (a system prompt, few-shot examples)
in front of every request of another workload (``base``).

The prefix ids are the same list in every request, so a prefix-caching allocator can share
them. The base workload is built for max_model_len - prefix_len, so its own length policy
(drop for data, clip for synthetic) keeps every prefixed request within the model's context.
The prefix is random ids (seeded), or real text when the base has real prompts.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError, random_prompts, rng_for
from .tokenizer import load_tokenizer

DEFAULTS: dict[str, Any] = {
    "base": "sharegpt",  # sharegpt | alpaca | alpaca-synthetic | synthetic
    "prefix_len": 80,  # tokens of the common prefix
}

PREFIX_TEXT = (
    "You are a careful assistant. Answer the user's question accurately and concisely, show your "
    "reasoning when it helps, and say so when you do not know. Example. Question: What is the capital "
    "of France? Answer: Paris. Question: How many legs does a spider have? Answer: Eight. Question: "
    "Convert 3 kilometres to metres. Answer: 3,000 metres. "
)

Builder = Callable[[Knobs, CommonKnobs, int, ModelLimits], PromptSet]


def real_prefix(tokenizer_name: str, length: int) -> list[int]:
    """``length`` token ids of PREFIX_TEXT (repeated as needed) in the run's tokenizer."""
    tok = load_tokenizer(tokenizer_name)
    text = PREFIX_TEXT
    while True:
        ids = tok.encode([text])[0]
        if len(ids) >= length:
            return ids[:length]
        text += PREFIX_TEXT


def make_shared_prefix_builder(base_builder: Callable[[str], tuple[str, Builder]], base_names: tuple[str, ...]) -> Builder:
    """``base_builder(name)`` -> (canonical base name, its builder); ``base_names`` for messages."""

    def build_shared_prefix(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
        base_name = knobs.get_str("base")
        try:
            canonical, build_base = base_builder(base_name)
        except KeyError:
            raise knobs.fail("base", f"must be one of {', '.join(base_names)}", base_name) from None
        prefix_len = knobs.get_int("prefix_len", min_value=0)
        room = limits.max_model_len - prefix_len
        if room < 2:
            raise knobs.fail("prefix_len", f"leaves no room for a prompt and an output in max_model_len="
                             f"{limits.max_model_len}", prefix_len)
        base = build_base(knobs, common, count, dataclasses.replace(limits, max_model_len=room))
        if base.meta.get("real_prompts"):
            if limits.tokenizer_name is None:
                raise WorkloadError("shared_prefix: real prompts need a tokenizer")
            prefix, prefix_source = real_prefix(limits.tokenizer_name, prefix_len), "text"
        else:
            prefix = random_prompts(rng_for(common.seed, "prefix"), [prefix_len], limits.vocab_size)[0]
            prefix_source = "random"
        prompts = [prefix + prompt for prompt in base.prompts]
        meta = {**base.meta, "base_workload": base.name, "base": canonical, "prefix_len": prefix_len,
                "prefix_source": prefix_source}
        return PromptSet(f"shared_prefix({base.name},L={prefix_len})", prompts, base.output_lens, meta)

    return build_shared_prefix
