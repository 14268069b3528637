"""Next-token choice for the sampled rows of a step: greedy, temperature / top-k / top-p, beams.

Randomness is counter-based: the draw for the token at position p of sample s of request r uses
a fresh ``torch.Generator`` seeded from (run seed + r, s, p). So a request's tokens do not depend
on which other requests share its batches, on preemption (a recomputed sequence draws the same
tokens again), or on the device. Parallel sampling (``num_samples`` = n > 1 on a request's first
sampled token): the extra samples are drawn as samples 1..n-1 at the same position, the streams
the forked children then continue. With temperature 0 every sample is the greedy token.

Beam search (``num_logprobs`` = k > 0) returns the k most likely next tokens with their
log-softmax probabilities of the raw logits (temperature, top-k and top-p do not apply). The
engine keeps cumulative log-probabilities and keeps the k best continuations over all beams;
every beam runs to the request's output length (EOS ignored), and the request returns the k
hypotheses of the last step ranked by cumulative log-probability: transformers'
``generate(num_beams=k, num_return_sequences=k, do_sample=False)``. Its length penalty (default
1.0) divides every score by the same generated length and its early stopping never triggers
before that length, so neither changes the ranking.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kvbench.batch import SeqChunk
from kvbench.config.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # nucleus: smallest set of tokens whose probability reaches top_p (1 = off)
    top_k: int = 0  # keep the k most likely tokens (0 = off)

    def __post_init__(self) -> None:
        temperature = self.temperature
        if not (isinstance(temperature, (int, float)) and temperature >= 0 and math.isfinite(temperature)):
            raise ConfigError(f"backend.temperature must be a number >= 0; got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ConfigError(f"backend.top_p must be in (0, 1]; got {self.top_p!r}")
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0):
            raise ConfigError(f"backend.top_k must be an integer >= 0; got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_cfg(cls, backend_cfg) -> "SamplingParams":
        if backend_cfg is None:
            return cls()
        get = backend_cfg.get
        return cls(temperature=float(get("temperature", 0.0) or 0.0), top_p=float(get("top_p", 1.0) or 1.0),
                   top_k=int(get("top_k", 0) or 0))


def draw_seed(base: int, sample_index: int, position: int) -> int:
    """The seed of one draw: well mixed from (run seed + request id, sample index, position)."""
    return int(np.random.SeedSequence([base & 0xFFFFFFFF, base >> 32 & 0xFFFFFFFF, sample_index, position])
               .generate_state(2, np.uint32).view(np.uint64)[0] >> 1)


class Sampler:
    def __init__(self, params: SamplingParams, seed: int = 0) -> None:
        self.params = params
        self.seed = int(seed)

    def __call__(self, logits: torch.Tensor, chunks: list[SeqChunk]):
        """logits [R, V] of the sampled chunks (in order) -> (next_tokens, extra_tokens, top_logprobs)."""
        next_tokens: dict[int, int] = {}
        extra: dict[int, list[int]] = {}
        top: dict[int, list[tuple[int, float]]] = {}
        beam_rows = [i for i, c in enumerate(chunks) if c.num_logprobs > 0]
        plain_rows = [i for i, c in enumerate(chunks) if c.num_logprobs <= 0]
        if beam_rows:
            k_max = max(chunks[i].num_logprobs for i in beam_rows)
            logprobs = torch.log_softmax(logits[beam_rows].float(), dim=-1)
            values, indices = logprobs.topk(min(k_max, logprobs.shape[-1]), dim=-1)
            values, indices = values.tolist(), indices.tolist()
            for row, i in enumerate(beam_rows):
                chunk = chunks[i]
                k = chunk.num_logprobs
                top[chunk.seq_id] = list(zip(indices[row][:k], values[row][:k]))
                next_tokens[chunk.seq_id] = indices[row][0]
        if not plain_rows:
            return next_tokens, extra, top
        if self.params.greedy:
            picks = (logits if len(plain_rows) == len(chunks) else logits[plain_rows]).argmax(dim=-1).tolist()
            for token, i in zip(picks, plain_rows):
                chunk = chunks[i]
                next_tokens[chunk.seq_id] = token
                if chunk.num_samples > 1:
                    extra[chunk.seq_id] = [token] * (chunk.num_samples - 1)
            return next_tokens, extra, top
        probs = self._probs(logits[plain_rows]).cpu()
        for row, i in enumerate(plain_rows):
            chunk = chunks[i]
            base = self.seed + chunk.request_id
            position = chunk.context_len  # the position of the token being drawn
            next_tokens[chunk.seq_id] = self._draw(probs[row], base, chunk.sample_index, position)
            if chunk.num_samples > 1:
                extra[chunk.seq_id] = [self._draw(probs[row], base, chunk.sample_index + s, position)
                                       for s in range(1, chunk.num_samples)]
        return next_tokens, extra, top

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Temperature, then top-k, then top-p; float32 probabilities [R, V]."""
        p = self.params
        scores = logits.float() / p.temperature
        if 0 < p.top_k < scores.shape[-1]:
            kth = scores.topk(p.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            sorted_probs = sorted_scores.softmax(dim=-1)
            before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the strictly more likely tokens
            drop = before >= p.top_p  # the first token is always kept
            sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
            scores = torch.empty_like(scores).scatter_(-1, order, sorted_scores)
        return scores.softmax(dim=-1)

    @staticmethod
    def _draw(probs: torch.Tensor, base: int, sample_index: int, position: int) -> int:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(draw_seed(base, sample_index, position))
        return int(torch.multinomial(probs, 1, generator=generator))
