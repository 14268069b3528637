"""Synthetic lengths: fixed, uniform or lognormal; prompts are random ids.

Drawn lengths that do not fit the model are clipped (see ``clip_to_context``), never dropped,
so the stream keeps exactly the requested number of requests.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, clip_to_context, random_prompts, rng_for

DEFAULTS: dict[str, Any] = {
    "distribution": "fixed",  # fixed | uniform | lognormal
    "prompt_len": 128,  # fixed
    "output_len": 128,
    "prompt_min": 16,  # uniform, inclusive bounds
    "prompt_max": 512,
    "output_min": 16,
    "output_max": 512,
    "prompt_mean": 128.0,  # lognormal: arithmetic mean in tokens and sigma of the underlying normal
    "prompt_sigma": 0.5,
    "output_mean": 128.0,
    "output_sigma": 0.5,
}


def lognormal_lengths(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    """Integer lengths, lognormal with arithmetic mean ``mean``: mu = ln(mean) - sigma^2 / 2."""
    mu = math.log(mean) - sigma * sigma / 2
    return np.rint(rng.lognormal(mu, sigma, size)).astype(np.int64)


def lengths_to_prompts(name: str, prompt_lens: np.ndarray, output_lens: np.ndarray, seed: int,
                       limits: ModelLimits, meta: dict[str, Any]) -> PromptSet:
    prompt_lens, output_lens, clipped = clip_to_context(prompt_lens, output_lens, limits.max_model_len)
    prompts = random_prompts(rng_for(seed, "prompt_ids"), prompt_lens, limits.vocab_size)
    meta = {**meta, "source": "synthetic", "clipped_to_context": clipped, "real_prompts": False}
    return PromptSet(name, prompts, output_lens.tolist(), meta)


def build_synthetic(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    kind = knobs.get_choice("distribution", ("fixed", "uniform", "lognormal"))
    rng = rng_for(common.seed, "lengths")
    if kind == "fixed":
        p, o = knobs.get_int("prompt_len", min_value=1), knobs.get_int("output_len", min_value=1)
        prompt_lens, output_lens = np.full(count, p), np.full(count, o)
        name, params = f"synthetic-fixed(p={p},o={o})", {"prompt_len": p, "output_len": o}
    elif kind == "uniform":
        bounds = {}
        for side in ("prompt", "output"):
            low = knobs.get_int(f"{side}_min", min_value=1)
            high = knobs.get_int(f"{side}_max", min_value=1)
            if high < low:
                raise knobs.fail(f"{side}_max", f"must be >= {side}_min ({low})", high)
            bounds[side] = (low, high)
        prompt_lens = rng.integers(bounds["prompt"][0], bounds["prompt"][1], size=count, endpoint=True)
        output_lens = rng.integers(bounds["output"][0], bounds["output"][1], size=count, endpoint=True)
        (pl, ph), (ol, oh) = bounds["prompt"], bounds["output"]
        name = f"synthetic-uniform(p={pl}..{ph},o={ol}..{oh})"
        params = {"prompt_min": pl, "prompt_max": ph, "output_min": ol, "output_max": oh}
    else:
        params = {}
        for side in ("prompt", "output"):
            params[f"{side}_mean"] = knobs.get_float(f"{side}_mean", positive=True)
            params[f"{side}_sigma"] = knobs.get_float(f"{side}_sigma", min_value=0.0)
        prompt_lens = lognormal_lengths(rng, params["prompt_mean"], params["prompt_sigma"], count)
        output_lens = lognormal_lengths(rng, params["output_mean"], params["output_sigma"], count)
        name = (f"synthetic-lognormal(p~{params['prompt_mean']:g}/{params['prompt_sigma']:g},"
                f"o~{params['output_mean']:g}/{params['output_sigma']:g})")
    meta = {"distribution": kind, **params}
    return lengths_to_prompts(name, np.asarray(prompt_lens), np.asarray(output_lens), common.seed, limits, meta)
