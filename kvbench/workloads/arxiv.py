"""arXiv summarization: long prompts (a paper) and short outputs (its abstract), lengths only.

The table Vidur ships (``num_prefill_tokens``, ``num_decode_tokens`` in Llama-2 tokens, 28,257
requests, already filtered by its authors to at most 4,096 tokens in all; see
``data/traces/README.md``). Requests are a seeded draw of its rows, timed by the common
arrival process (``request_rate``, ``burstiness``) like ShareGPT; the table has no arrival times. Prompts are random ids of the table's lengths. Rows
whose prompt + output exceed the model are dropped before the draw (as the data workloads do).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, LengthFilter, ModelLimits, PromptSet
from .datasets import sample_pairs
from .traces import check_lengths, open_trace_text, read_csv_columns

SHIPPED = "arxiv_summarization_llama2.csv.gz"
COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
DEFAULTS: dict[str, Any] = {"path": None}  # a CSV with the columns above; null = the shipped copy
KEEP_ALL = LengthFilter(min_len=1)  # the table is filtered already; only the model's context applies


def build_arxiv(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    text, name = open_trace_text(knobs.get_str("path", optional=True), SHIPPED)
    table = read_csv_columns(text, name, COLUMNS)
    check_lengths(name, table["num_prefill_tokens"], table["num_decode_tokens"])
    prompt_lens = table["num_prefill_tokens"].astype(np.int64)
    output_lens = table["num_decode_tokens"].astype(np.int64)
    meta = {"source": f"table:{SHIPPED}", "trace_file": name, "length_tokenizer": "llama-2",
            "prompt_ids": "synthetic (random)",
            "pairs_over_context": int(np.count_nonzero(prompt_lens + output_lens > limits.max_model_len))}
    return sample_pairs("arxiv_summarization", prompt_lens, output_lens, KEEP_ALL, count, common.seed, limits,
                        None, meta, repeat=knobs.get_bool("repeat"))
