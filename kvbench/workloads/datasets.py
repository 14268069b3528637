"""Pieces the dataset-backed workloads (sharegpt, alpaca) share: read pairs, filter, sample."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .common import LengthFilter, ModelLimits, PromptSet, WorkloadError, random_prompts, rng_for, sample_indices
from .jsonstream import JsonArrayError, JsonArrayReader
from .tokcache import ReadPairs, TokenizedPairs, tokenized_pairs
from .tokenizer import load_tokenizer


def read_json_records(path: Path) -> tuple[list[object], dict[str, Any]]:
    """Every complete element of a JSON array file; a torn tail is ignored and reported."""
    reader = JsonArrayReader(path)
    try:
        records = list(reader)
    except JsonArrayError as exc:
        raise WorkloadError(str(exc)) from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from None
    return records, {"records": reader.num_elements, "torn_tail": reader.torn, "ignored_chars": reader.ignored_chars}


def dataset_file(path: str, what: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise WorkloadError(f"workload.path: no such file {str(file)!r} ({what})")
    return file


def tokenize_dataset(kind: str, file: Path, read_pairs: ReadPairs, limits: ModelLimits, need_ids: bool) -> TokenizedPairs:
    if limits.tokenizer_name is None:
        raise WorkloadError(f"{kind} from a dataset file needs a tokenizer (the model config's tokenizer is null)")
    tok = load_tokenizer(limits.tokenizer_name)
    pairs = tokenized_pairs(kind, file, read_pairs, tok, need_ids=need_ids)
    pairs.source.update(tokenizer=tok.name, vocab_hash=tok.vocab_hash[:16], cache=pairs.cache)
    return pairs


MAX_REUSE = 10  # a draw that reuses each pair more often than this on average needs workload.repeat=true


def sample_pairs(name: str, prompt_lens: np.ndarray, output_lens: np.ndarray, length_filter: LengthFilter,
                 count: int, seed: int, limits: ModelLimits, pairs: TokenizedPairs | None,
                 meta: dict[str, Any], repeat: bool = False) -> PromptSet:
    """Filter the pairs, draw ``count`` of them (seeded), and make their prompts.

    A pool far smaller than the request count (a torn or tiny file) is refused unless
    ``repeat``: ``count`` requests from a handful of pairs would measure copies of one request.

    Prompts are the tokenized text when ``pairs`` carries prompt ids, otherwise random ids of
    the right length (the sim backend needs lengths only).
    """
    pool = np.flatnonzero(length_filter.mask(prompt_lens, output_lens, limits.max_model_len))
    read = f"{meta['records']} records read" if "records" in meta else f"{prompt_lens.size} pairs"
    if prompt_lens.size == 0:
        raise WorkloadError(f"{name}: no usable record in {meta.get('dataset_path', 'the data')} ({read}; none has "
                            "a prompt followed by a reply)")
    if pool.size * MAX_REUSE < count and not repeat:
        raise WorkloadError(f"workload.num_requests: {count} requests from only {pool.size} usable pairs of "
                            f"{meta.get('dataset_path', name)} ({read}, torn tail: {bool(meta.get('torn_tail'))}); "
                            "lower num_requests or set workload.repeat=true")
    if pool.size == 0:
        raise WorkloadError(f"{name}: no pair of {prompt_lens.size} passes the length filter "
                            f"{length_filter.describe()} with max_model_len={limits.max_model_len}")
    chosen = pool[sample_indices(rng_for(seed, "sample"), pool.size, count)]
    if pairs is not None and pairs.ids_flat is not None:
        prompts = [pairs.prompt_ids(int(i)) for i in chosen]
        top = max((max(p) for p in prompts), default=0)
        if top >= limits.vocab_size:
            raise WorkloadError(f"{name}: the tokenizer produced token id {top} but the model's vocab_size is "
                                f"{limits.vocab_size}")
    else:
        prompts = random_prompts(rng_for(seed, "prompt_ids"), prompt_lens[chosen], limits.vocab_size)
    meta = {
        **meta,
        "pairs_total": int(prompt_lens.size),
        "pairs_after_filter": int(pool.size),
        "pool_mean_prompt_len": float(prompt_lens[pool].mean()),
        "pool_mean_output_len": float(output_lens[pool].mean()),
        "filter": length_filter.describe(),
        "sampled_with_replacement": bool(count > pool.size),
        "real_prompts": pairs is not None and pairs.ids_flat is not None,
    }
    return PromptSet(name, prompts, [int(x) for x in output_lens[chosen]], meta)
