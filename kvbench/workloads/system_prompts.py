"""Shared system prompts: K system prompts of given lengths, each request drawing one by Zipf.

Request i is ``system[k] + base prompt i`` with k drawn with P(k) proportional to
1 / (k + 1) ** ``zipf_s`` over the K prompts (k = 0 the most popular). The base workload is
built for max_model_len minus the longest system prompt. System prompt ids are random (seeded).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, random_prompts, rng_for

DEFAULTS: dict[str, Any] = {
    "base": "sharegpt",  # sharegpt | alpaca | alpaca-synthetic | synthetic
    "system_prompt_lens": [256, 512, 768, 1024],  # one entry per system prompt, in tokens
    "zipf_s": 1.1,  # Zipf exponent of the draw (0 = uniform)
}

Builder = Callable[[Knobs, CommonKnobs, int, ModelLimits], PromptSet]


def zipf_draw(rng: np.random.Generator, k: int, s: float, count: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, k + 1, dtype=float) ** s
    return rng.choice(k, size=count, p=weights / weights.sum())


def make_system_prompts_builder(base_builder: Callable[[str], tuple[str, Builder]], base_names: tuple[str, ...]) -> Builder:
    def build_system_prompts(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
        base_name = knobs.get_str("base")
        try:
            canonical, build_base = base_builder(base_name)
        except KeyError:
            raise knobs.fail("base", f"must be one of {', '.join(base_names)}", base_name) from None
        lens = knobs.raw("system_prompt_lens")
        if not isinstance(lens, (list, tuple)) or not lens or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in lens):
            raise knobs.fail("system_prompt_lens", "must be a non-empty list of integers >= 1", lens)
        s = knobs.get_float("zipf_s", min_value=0.0)
        room = limits.max_model_len - max(lens)
        if room < 2:
            raise knobs.fail("system_prompt_lens", f"leave no room for a prompt and an output in max_model_len="
                             f"{limits.max_model_len}", lens)
        base = build_base(knobs, common, count, dataclasses.replace(limits, max_model_len=room))
        system = random_prompts(rng_for(common.seed, "system_prompts"), list(lens), limits.vocab_size)
        picks = zipf_draw(rng_for(common.seed, "system_pick"), len(lens), s, len(base.prompts))
        prompts = [system[int(k)] + prompt for k, prompt in zip(picks, base.prompts)]
        meta = {**base.meta, "base_workload": base.name, "base": canonical, "system_prompt_lens": list(lens),
                "zipf_s": s, "system_prompt_counts": np.bincount(picks, minlength=len(lens)).tolist()}
        return PromptSet(f"system_prompts({base.name},K={len(lens)})", prompts, base.output_lens, meta)

    return build_system_prompts
