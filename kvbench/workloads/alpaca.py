"""Alpaca: short instructions with short answers (the PagedAttention paper's second dataset).

Alpaca's data cannot be installed here, so there are two forms:
- ``alpaca`` with ``path`` = a local ``alpaca_data.json`` (a JSON array of {instruction, input,
  output}): prompt = instruction, plus a newline and the input when there is one; output =
  output. Pairs with an empty prompt or output, or that do not fit the model, are dropped.
- ``alpaca-synthetic`` (also what ``alpaca`` without a path gives, reported under that name):
  lognormal lengths with the means the PagedAttention paper publishes for Alpaca (Kwon et al.,
  SOSP 2023: input 19.31, output 58.45 tokens). The paper gives means only; the spreads are our
  choice: sigma 0.5 for inputs (coefficient of variation 0.53, instructions are of similar size)
  and 0.8 for outputs (CV 0.95, answers range from one word to a few paragraphs). Both are
  knobs. Prompts are random ids.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import CommonKnobs, Knobs, LengthFilter, ModelLimits, PromptSet, rng_for
from .datasets import dataset_file, read_json_records, sample_pairs, tokenize_dataset
from .synthetic import lengths_to_prompts, lognormal_lengths

PAPER_MEAN_PROMPT_LEN = 19.31  # Kwon et al. 2023, Alpaca, tokens
PAPER_MEAN_OUTPUT_LEN = 58.45

SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "synthetic_prompt_sigma": 0.5,
    "synthetic_output_sigma": 0.8,
}
DEFAULTS: dict[str, Any] = {
    "path": None,  # a local alpaca_data.json; null = the synthetic stand-in, reported as alpaca-synthetic
    "real_prompts": False,
    **SYNTHETIC_DEFAULTS,
}
ALPACA_FILTER = LengthFilter(min_len=1)


def read_alpaca_pairs(path: Path) -> tuple[list[str], list[str], dict[str, Any]]:
    records, source = read_json_records(path)
    prompts, outputs = [], []
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("instruction"), str):
            continue
        extra = record.get("input")
        prompt = record["instruction"] + (f"\n{extra}" if isinstance(extra, str) and extra else "")
        output = record.get("output")
        if isinstance(output, str):
            prompts.append(prompt)
            outputs.append(output)
    source["pairs"] = len(prompts)
    return prompts, outputs, source


def build_alpaca_synthetic(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    if knobs.values.get("path") is not None:
        raise knobs.fail("path", "alpaca-synthetic reads no file; use workload=alpaca with workload.path", knobs.raw("path"))
    if knobs.values.get("real_prompts"):
        raise knobs.fail("real_prompts", "alpaca-synthetic has no text; give workload.path=alpaca_data.json",
                         knobs.raw("real_prompts"))
    prompt_sigma = knobs.get_float("synthetic_prompt_sigma", min_value=0.0)
    output_sigma = knobs.get_float("synthetic_output_sigma", min_value=0.0)
    rng = rng_for(common.seed, "lengths")
    prompt_lens = lognormal_lengths(rng, PAPER_MEAN_PROMPT_LEN, prompt_sigma, count)
    output_lens = lognormal_lengths(rng, PAPER_MEAN_OUTPUT_LEN, output_sigma, count)
    meta = {
        "synthetic": True,
        "distribution": "lognormal",
        "prompt_mean": PAPER_MEAN_PROMPT_LEN, "prompt_sigma": prompt_sigma,
        "output_mean": PAPER_MEAN_OUTPUT_LEN, "output_sigma": output_sigma,
        "fitted_to": "PagedAttention paper (Kwon et al., SOSP 2023) Alpaca means; spreads chosen, not published",
    }
    return lengths_to_prompts("alpaca-synthetic", prompt_lens, output_lens, common.seed, limits, meta)


def build_alpaca(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    path = knobs.get_str("path", optional=True)
    if path is None:
        return build_alpaca_synthetic(knobs, common, count, limits)
    real = knobs.get_bool("real_prompts")
    file = dataset_file(path, "a local alpaca_data.json")
    pairs = tokenize_dataset("alpaca", file, read_alpaca_pairs, limits, need_ids=real)
    meta = {"synthetic": False, "source": f"dataset:{file.name}", "dataset_path": str(file),
            "length_tokenizer": limits.tokenizer_name, **pairs.source, **pairs.timings_s}
    return sample_pairs("alpaca", pairs.prompt_lens, pairs.output_lens, ALPACA_FILTER, count, common.seed,
                        limits, pairs, meta,
                        repeat=knobs.get_bool("repeat"))

