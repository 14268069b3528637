"""What every workload shares: the result type, knob parsing, arrivals, seeded streams, filters."""
from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbench.requests import Request


class WorkloadError(ValueError):
    """Bad workload input (unknown name, bad knob, missing file); the app exits with code 2."""


@dataclass
class Workload:
    """A request stream, sorted by arrival, with ``request_id`` 0..N-1."""

    name: str  # as reported in results, e.g. "sharegpt", "alpaca-synthetic"
    requests: list[Request]
    request_rate: float  # requests per second; inf = all arrive at time 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelLimits:
    """What a workload must respect of the model it is built for."""

    vocab_size: int
    max_model_len: int  # prompt + output of one sequence must fit
    tokenizer_name: str | None  # "smollm2" or a local tokenizer directory; None = no tokenizer

    def __post_init__(self) -> None:
        if self.vocab_size < 1:
            raise WorkloadError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if self.max_model_len < 2:
            raise WorkloadError(f"max_model_len must be >= 2 (one prompt and one output token), got {self.max_model_len}")


@dataclass(frozen=True)
class PromptSet:
    """What a workload builder returns: N prompts and output lengths, not yet timed."""

    name: str
    prompts: list[list[int]]
    output_lens: list[int]
    meta: dict[str, Any]
    arrivals: list[float] | None = None  # the builder's own arrival times (multiturn); None = the common process
    follow_ups: list | None = None  # per prompt, its conversation's next turns (kvbench.requests.FollowUp chain)
    priorities: list[int] | None = None  # per prompt, its priority read from the data (a trace column)


# ---------------------------------------------------------------------------------------------
# Knobs


COMMON_DEFAULTS: dict[str, Any] = {
    "num_requests": 200,
    "request_rate": math.inf,  # requests/s; inf = all at time 0
    "burstiness": 1.0,  # gamma shape of inter-arrival times; 1.0 = Poisson
    "n": 1,  # parallel samples per request
    "beam_width": 1,
    "ignore_eos": True,  # read by the engine (kvbench.app), not the builders: stop samples at EOS when false
    "seed": None,  # null: the run's seed (kvbench.config.seeds fills it in); a direct build without one: 0
    "repeat": False,  # data workloads: allow drawing each pair more than MAX_REUSE times on average
    "duration_s": None,  # if set: generate arrivals until duration_s; num_requests is ignored
    "max_concurrency": None,  # read by the engine (kvbench.app): at most this many requests in flight
}


class Knobs:
    """Typed access to one workload's knobs; every failure is one line naming the key."""

    def __init__(self, values: Mapping[str, Any], workload: str) -> None:
        self.values = dict(values)
        self.workload = workload

    def fail(self, key: str, what: str, value: Any) -> WorkloadError:
        return WorkloadError(f"workload.{key}: {what}, got {value!r} (workload {self.workload})")

    def raw(self, key: str) -> Any:
        return self.values[key]

    def get_int(self, key: str, *, min_value: int | None = None, optional: bool = False) -> int | None:
        value = self.values[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise self.fail(key, "must be an integer", value)
        if min_value is not None and value < min_value:
            raise self.fail(key, f"must be >= {min_value}", value)
        return int(value)

    def get_float(self, key: str, *, positive: bool = False, min_value: float | None = None,
              optional: bool = False, allow_inf: bool = False) -> float | None:
        value = self.values[key]
        if value is None and optional:
            return None
        try:
            if isinstance(value, bool):
                raise TypeError
            number = float(value)  # also parses "inf", which is how YAML spells it through OmegaConf
        except (TypeError, ValueError):
            raise self.fail(key, "must be a number", value) from None
        if math.isnan(number) or (math.isinf(number) and not allow_inf):
            raise self.fail(key, "must be a finite number", value)
        if positive and not number > 0:
            raise self.fail(key, "must be > 0", value)
        if min_value is not None and number < min_value:
            raise self.fail(key, f"must be >= {min_value}", value)
        return number

    def get_bool(self, key: str) -> bool:
        value = self.values[key]
        if isinstance(value, bool):
            return value
        raise self.fail(key, "must be true or false", value)

    def get_choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.values[key]
        if value not in allowed:
            raise self.fail(key, f"must be one of {', '.join(allowed)}", value)
        return value

    def get_str(self, key: str, *, optional: bool = False) -> str | None:
        value = self.values[key]
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string", value)
        return value


DEFAULT_SEED = 0  # conf/config.yaml's seed: what a null workload.seed means outside a run


def seed_knob(knobs: Knobs) -> int:
    """``workload.seed``; null (a build outside a run, which fills it with the run's seed) is DEFAULT_SEED."""
    seed = knobs.get_int("seed", min_value=0, optional=True)
    return DEFAULT_SEED if seed is None else seed


@dataclass(frozen=True)
class CommonKnobs:
    num_requests: int | None
    request_rate: float
    burstiness: float
    n: int
    beam_width: int
    seed: int
    duration_s: float | None

    @classmethod
    def parse(cls, knobs: Knobs) -> "CommonKnobs":
        rate = knobs.get_float("request_rate", allow_inf=True)
        if not rate > 0:
            raise knobs.fail("request_rate", "must be > 0 (inf = all requests at time 0)", knobs.raw("request_rate"))
        duration = knobs.get_float("duration_s", positive=True, optional=True)
        if duration is not None and math.isinf(rate):
            raise knobs.fail("duration_s", "needs a finite request_rate", knobs.raw("duration_s"))
        num = knobs.get_int("num_requests", min_value=1, optional=duration is not None)
        if num is None and duration is None:
            raise knobs.fail("num_requests", "must be set unless duration_s is", None)
        return cls(
            num_requests=num,
            request_rate=rate,
            burstiness=knobs.get_float("burstiness", positive=True),
            n=knobs.get_int("n", min_value=1),
            beam_width=knobs.get_int("beam_width", min_value=1),
            seed=seed_knob(knobs),
            duration_s=duration,
        )

    @classmethod
    def parse_replay(cls, knobs: Knobs) -> "CommonKnobs":
        """A replayed trace's: its arrivals are the trace's (rate and burstiness do not apply)."""
        return cls(
            num_requests=knobs.get_int("num_requests", min_value=1, optional=True),
            request_rate=math.nan,
            burstiness=math.nan,
            n=knobs.get_int("n", min_value=1),
            beam_width=knobs.get_int("beam_width", min_value=1),
            seed=seed_knob(knobs),
            duration_s=knobs.get_float("duration_s", positive=True, optional=True),
        )


# ---------------------------------------------------------------------------------------------
# Seeded streams: one generator per purpose, so changing one knob does not shift another's draws.


def rng_for(seed: int, stream: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(stream.encode())])


MAX_ARRIVALS = 10_000_000


def arrival_times(common: CommonKnobs) -> np.ndarray:
    """Arrival times in seconds, starting at 0 (as vLLM's benchmark_serving sends its first request).

    Inter-arrival gaps are gamma(shape=burstiness, mean=1/rate): burstiness 1 is a Poisson
    process, < 1 burstier, > 1 more regular. With ``duration_s`` the stream holds every arrival
    in [0, duration_s) and ``num_requests`` is ignored.
    """
    rate, shape = common.request_rate, common.burstiness
    if math.isinf(rate):
        return np.zeros(common.num_requests)
    rng = rng_for(common.seed, "arrivals")
    scale = 1.0 / (rate * shape)
    if common.duration_s is None:
        gaps = rng.gamma(shape, scale, size=common.num_requests - 1)
        return np.concatenate([[0.0], np.cumsum(gaps)])
    expected = rate * common.duration_s
    if expected > MAX_ARRIVALS:
        raise WorkloadError(
            f"workload.duration_s: {common.duration_s} s at {rate}/s is over {MAX_ARRIVALS:,} requests")
    times = [np.zeros(1)]
    last = 0.0
    while last < common.duration_s:
        batch = int(expected * 0.25) + 64
        chunk = last + np.cumsum(rng.gamma(shape, scale, size=batch))
        times.append(chunk)
        last = float(chunk[-1])
    all_times = np.concatenate(times)
    return all_times[all_times < common.duration_s]


def sample_indices(rng: np.random.Generator, pool_size: int, count: int) -> np.ndarray:
    """``count`` indices into a pool: without replacement while the pool lasts, then another pass."""
    passes = [rng.permutation(pool_size) for _ in range(-(-count // pool_size))]
    return np.concatenate(passes)[:count]


def random_prompts(rng: np.random.Generator, lengths: list[int] | np.ndarray, vocab_size: int) -> list[list[int]]:
    """Synthetic prompts: uniform random ids, so requests share no prefix by accident."""
    lengths = np.asarray(lengths, dtype=np.int64)
    flat = rng.integers(0, vocab_size, size=int(lengths.sum()), dtype=np.int64)
    return [chunk.tolist() for chunk in np.split(flat, np.cumsum(lengths)[:-1])]


# ---------------------------------------------------------------------------------------------
# Length policies


@dataclass(frozen=True)
class LengthFilter:
    """Which (prompt, output) pairs sampled from a dataset are kept; the rest are dropped.

    ShareGPT uses the filter of vLLM's benchmarks: drop prompt or output under 4 tokens, prompt
    over 1,024, prompt + output over 2,048. Every dataset filter also drops pairs that do not
    fit the model (prompt + output > max_model_len): data workloads drop, synthetic ones clip.
    """

    min_len: int = 1
    max_prompt_len: int | None = None
    max_total_len: int | None = None

    def mask(self, prompt_lens: np.ndarray, output_lens: np.ndarray, max_model_len: int) -> np.ndarray:
        total = prompt_lens + output_lens
        keep = (prompt_lens >= self.min_len) & (output_lens >= self.min_len) & (total <= max_model_len)
        if self.max_prompt_len is not None:
            keep &= prompt_lens <= self.max_prompt_len
        if self.max_total_len is not None:
            keep &= total <= self.max_total_len
        return keep

    def describe(self) -> dict[str, int | None]:
        return {"min_len": self.min_len, "max_prompt_len": self.max_prompt_len, "max_total_len": self.max_total_len}


SHAREGPT_FILTER = LengthFilter(min_len=4, max_prompt_len=1024, max_total_len=2048)


def clip_to_context(prompt_lens: np.ndarray, output_lens: np.ndarray, max_model_len: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Clip drawn lengths so that prompt + output <= max_model_len, both >= 1.

    The output is cut first; a prompt that alone fills the context keeps max_model_len - 1
    tokens and one output token. Returns the clipped arrays and how many requests changed.
    """
    prompt = np.clip(prompt_lens, 1, max_model_len - 1)
    output = np.clip(output_lens, 1, None)
    output = np.minimum(output, max_model_len - prompt)
    changed = int(np.count_nonzero((prompt != prompt_lens) | (output != output_lens)))
    return prompt, output, changed


def length_stats(prompts: list[list[int]], output_lens: list[int]) -> dict[str, float]:
    if not prompts:
        return {"mean_prompt_len": 0.0, "mean_output_len": 0.0}
    return {
        "mean_prompt_len": float(np.mean([len(p) for p in prompts])),
        "mean_output_len": float(np.mean(output_lens)),
    }
