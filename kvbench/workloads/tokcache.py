"""Token lengths (and prompt ids) of a dataset's (prompt, output) pairs, cached on disk.

Tokenizing ShareGPT takes seconds and every run needs it, so the first run writes the result
under the cache dir (``$KVBENCH_CACHE``, default ``~/.cache/kvbench``) and later runs read it.
A cache entry is keyed by the dataset (its kind and a hash of the file's bytes) and the tokenizer
(its name and a hash of its vocabulary), and written atomically (temp file + rename), so
concurrent runs and interrupted runs never see half a file. Two files per key: ``.lengths.npz``
(small, always) and ``.prompt_ids.npz`` (written only when a run needs real prompts).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the pair extraction or the file layout changes
ReadPairs = Callable[[Path], tuple[list[str], list[str], dict[str, Any]]]


def cache_dir() -> Path:
    return Path(os.environ.get("KVBENCH_CACHE") or "~/.cache/kvbench").expanduser()


def file_digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class TokenizedPairs:
    """Per pair, in file order: token lengths, and the prompt ids when asked for."""

    prompt_lens: np.ndarray  # int64 [P]
    output_lens: np.ndarray  # int64 [P]
    source: dict[str, Any]  # what reading the file found (records, torn tail, ...)
    cache: str  # "hit" or "miss" (the file was parsed and tokenized in this run)
    ids_flat: np.ndarray | None = None  # int32, all prompts concatenated
    ids_offsets: np.ndarray | None = None  # int64 [P + 1]
    timings_s: dict[str, float] = field(default_factory=dict)

    def prompt_ids(self, index: int) -> list[int]:
        assert self.ids_flat is not None and self.ids_offsets is not None, "prompt ids were not loaded"
        return self.ids_flat[self.ids_offsets[index]:self.ids_offsets[index + 1]].tolist()


def _save_atomic(path: Path, **arrays: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name + ".", suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(0o644)  # NamedTemporaryFile makes 0600; the cache is as readable as any cache
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache dir costs time on the next run, never the run itself
        log.warning("could not write the token cache %s: %s", path, exc)
        if "tmp" in locals():
            tmp.unlink(missing_ok=True)


def _load(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in names}
    except Exception as exc:  # corrupt or foreign file: recompute and overwrite
        log.warning("ignoring unreadable token cache %s: %s", path, exc)
        return None


def tokenized_pairs(kind: str, path: Path, read_pairs: ReadPairs, tok: Tokenizer, *, need_ids: bool) -> TokenizedPairs:
    """Token lengths of the (prompt, output) pairs ``read_pairs`` extracts from ``path``."""
    key = f"{kind}-{file_digest(path)}-{tok.slug}-{tok.vocab_hash[:16]}-v{CACHE_FORMAT}"
    lengths_path = cache_dir() / f"{key}.lengths.npz"
    ids_path = cache_dir() / f"{key}.prompt_ids.npz"

    lengths = _load(lengths_path, ("prompt_lens", "output_lens", "source"))
    ids = _load(ids_path, ("ids_flat", "ids_offsets")) if need_ids else None
    if lengths is not None and (ids is not None or not need_ids):
        return TokenizedPairs(
            prompt_lens=lengths["prompt_lens"].astype(np.int64),
            output_lens=lengths["output_lens"].astype(np.int64),
            source=json.loads(str(lengths["source"])),
            cache="hit",
            ids_flat=None if ids is None else ids["ids_flat"],
            ids_offsets=None if ids is None else ids["ids_offsets"],
        )

    timings: dict[str, float] = {}
    start = time.perf_counter()
    prompts, outputs, source = read_pairs(path)
    timings["parse_s"] = time.perf_counter() - start
    log.info("tokenizing %d %s pairs with %s (once; cached under %s)", len(prompts), kind, tok.name, cache_dir())
    start = time.perf_counter()
    prompt_ids = tok.encode(prompts)
    prompt_lens = np.array([len(ids) for ids in prompt_ids], dtype=np.int64)
    if lengths is None:
        output_lens = np.array([len(ids) for ids in tok.encode(outputs)], dtype=np.int64)
        _save_atomic(lengths_path, prompt_lens=prompt_lens.astype(np.int32), output_lens=output_lens.astype(np.int32),
                     source=np.array(json.dumps(source)))
    else:
        output_lens = lengths["output_lens"].astype(np.int64)
    timings["tokenize_s"] = time.perf_counter() - start

    ids_flat = ids_offsets = None
    if need_ids:
        ids_offsets = np.concatenate([[0], np.cumsum(prompt_lens)]).astype(np.int64)
        ids_flat = np.fromiter((t for ids in prompt_ids for t in ids), dtype=np.int32, count=int(ids_offsets[-1]))
        _save_atomic(ids_path, ids_flat=ids_flat, ids_offsets=ids_offsets)
    return TokenizedPairs(prompt_lens, output_lens, source, "miss", ids_flat, ids_offsets, timings)
