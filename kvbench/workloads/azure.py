"""The Azure LLM inference trace 2023 (conversation and code), replayed with its real arrivals.

One row per request: ``arrived_at`` (seconds), ``num_prefill_tokens``, ``num_decode_tokens``
(the copy Vidur ships, from the Splitwise paper's release; see ``data/traces/README.md``).
Arrivals are the trace's, within the replay window and time scale of ``traces.Window``; the
output length is the trace's decode length (fixed, as if every reply ran to it).

The trace has lengths, not text: prompts are random token ids (seeded) of the trace's prompt
lengths, so no two requests share a prefix (the trace cannot say whether they did). Lengths are
in the tokenizer of the service that logged them, not the run's model. Requests whose prompt +
output exceed the model's context are dropped (``overlong: refuse``, the count is in the
summary as ``num_refused_overlong``) or cut to fit (``overlong: clip``, as ``clip_to_context``:
output first; counted in ``num_clipped``); a window where every request is too long is an error.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError, clip_to_context, random_prompts, rng_for
from .priorities import priority_column
from .traces import REPLAY_DEFAULTS, Window, check_lengths, open_trace_text, read_csv_columns, replay_meta

COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
OVERLONG = ("refuse", "clip")
DEFAULTS: dict[str, Any] = {**REPLAY_DEFAULTS, "overlong": "refuse", "priority_field": None}
SHIPPED = {"azure_conv": "azure_conv_2023.csv.gz", "azure_code": "azure_code_2023.csv.gz"}


def fit_to_context(name: str, policy: str, prompt_lens: np.ndarray, output_lens: np.ndarray,
                   max_model_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """(kept positions, prompt lens, output lens, meta) under the overlong policy."""
    over = (prompt_lens + output_lens) > max_model_len
    if over.all():
        raise WorkloadError(f"{name}: all {over.size} requests of the window are longer than the model's "
                            f"max_model_len={max_model_len} (prompt + output); raise model.max_model_len or "
                            "set workload.overlong=clip")
    if policy == "clip":
        prompt, output, clipped = clip_to_context(prompt_lens, output_lens, max_model_len)
        return np.arange(prompt.size), prompt, output, {"overlong": "clip", "clipped_to_context": clipped,
                                                        "num_refused_overlong": 0}
    keep = np.flatnonzero(~over)
    return keep, prompt_lens[keep], output_lens[keep], {
        "overlong": "refuse", "clipped_to_context": 0, "num_refused_overlong": int(over.sum())}


def make_builder(config_name: str) -> Callable[[Knobs, CommonKnobs, int | None, ModelLimits], PromptSet]:
    def build(knobs: Knobs, common: CommonKnobs, count: int | None, limits: ModelLimits) -> PromptSet:
        window = Window.parse(knobs)
        policy = knobs.get_choice("overlong", OVERLONG)
        text, name = open_trace_text(knobs.get_str("path", optional=True), SHIPPED[config_name])
        field = knobs.get_str("priority_field", optional=True)
        if field:
            header = text.split("\n", 1)[0].strip().split(",")
            if field not in header:
                raise WorkloadError(f"workload.priority_field: {name} has no column {field!r} "
                                    f"(columns: {', '.join(header)[:120]})")
        table = read_csv_columns(text, name, COLUMNS + ((field,) if field else ()))
        times = table["arrived_at"]
        picked, arrivals, scale = window.select(times, name)
        check_lengths(name, table["num_prefill_tokens"][picked], table["num_decode_tokens"][picked], records=picked)
        prompt_lens = table["num_prefill_tokens"][picked].astype(np.int64)
        output_lens = table["num_decode_tokens"][picked].astype(np.int64)
        keep, prompt_lens, output_lens, fit = fit_to_context(config_name, policy, prompt_lens, output_lens,
                                                             limits.max_model_len)
        arrivals, scale = window.rescale(arrivals, scale, keep)
        prompts = random_prompts(rng_for(common.seed, "prompt_ids"), prompt_lens, limits.vocab_size)
        meta = {**replay_meta(name, f"trace:{SHIPPED[config_name]}", window, scale, arrivals[keep],
                              times[picked], int(times.size)),
                **fit, "length_tokenizer": "the trace's own (unknown)", "prompt_ids": "synthetic (random)"}
        priorities = priority_column(table[field][picked][keep], field, name) if field else None
        return PromptSet(config_name, prompts, output_lens.tolist(), meta, arrivals=arrivals[keep].tolist(),
                         priorities=priorities)

    return build
