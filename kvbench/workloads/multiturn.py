"""Multi-turn chat from ShareGPT: each conversation replayed turn by turn, many users interleaved.

Turn t's prompt is the conversation so far (every earlier user message and reply) plus the new
user message, so each turn repeats the previous turn's prompt and reply as its prefix: the
workload where prefix caches earn their keep. Lengths come from the shipped per-turn table
(``data/sharegpt_turns_smollm2.csv``, SmolLM2 tokens, see ``make_turns_table``); token ids are
random (seeded) and fixed per conversation, so a turn's prompt starts with exactly the ids of
the previous turn's prompt and reply.

Timing. Conversations start as the common arrival process says (``request_rate`` is new
conversations per second). With ``dependent`` (default) only first turns are requests of the
stream; each carries its later turns as a ``FollowUp`` chain, and the engine releases turn
t+1 a think time (``think_time_dist`` with mean ``think_time_s``) after turn t finishes, its
prompt being turn t's prompt + the tokens the engine generated + the new user message: the
history a live chat holds, so a prefix cache can hit all of it. With ``dependent: false``
every turn is a request of its own: turn t+1 arrives at turn t's arrival + ``reply_len *
expected_tpot_s`` (its expected finish) + the think time, and its history holds the dataset
reply as random ids, which the engine did not generate, so a cache hits the previous prompt
only (a lower bound, and under load a turn may arrive before its predecessor finished).

Cut to the model: a conversation ends at the first turn whose prompt + reply exceed
max_model_len (or after ``max_turns``); replies have exactly their dataset length in both
modes, so the cut is known when the stream is built. ``num_requests`` counts turns.
"""
from __future__ import annotations

import csv
import importlib.resources
from typing import Any

import numpy as np

from kvbench.requests import FollowUp

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError, arrival_times, rng_for

TURNS_TABLE = "sharegpt_turns_smollm2.csv"
THINK_DISTS = ("exponential", "fixed")

DEFAULTS: dict[str, Any] = {
    "max_turns": 8,  # turns replayed per conversation at most
    "think_time_s": 10.0,  # mean user think time between a reply and the next message
    "think_time_dist": "exponential",  # exponential | fixed
    "expected_tpot_s": 0.05,  # seconds per output token used to place the next turn (dependent: false)
    "dependent": True,  # true: the engine releases turn t+1 after turn t finishes (see docstring)
}


def load_turns() -> list[list[tuple[int, int]]]:
    """The shipped table as conversations of (user_len, reply_len) exchanges."""
    text = importlib.resources.files(__package__).joinpath("data", TURNS_TABLE).read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#"))
    convs: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        convs.setdefault(int(row["conversation"]), []).append((int(row["user_len"]), int(row["reply_len"])))
    return [convs[k] for k in sorted(convs)]


def build_multiturn(knobs: Knobs, common: CommonKnobs, count: int, limits: ModelLimits) -> PromptSet:
    max_turns = knobs.get_int("max_turns", min_value=1)
    think = knobs.get_float("think_time_s", min_value=0.0)
    dist = knobs.get_choice("think_time_dist", THINK_DISTS)
    tpot = knobs.get_float("expected_tpot_s", min_value=0.0)
    dependent = knobs.get_bool("dependent")
    convs = load_turns()
    order = rng_for(common.seed, "conversations").permutation(len(convs))
    ids_rng, think_rng = rng_for(common.seed, "turn_ids"), rng_for(common.seed, "think")
    starts = arrival_times(common)
    prompts: list[list[int]] = []
    outputs: list[int] = []
    arrivals: list[float] = []
    turns_per_conv: list[int] = []
    follow_ups: list[FollowUp | None] = []
    total = 0
    for s, start in enumerate(starts):
        if total >= count:
            break
        history: list[int] = []
        t = float(start)
        done = 0
        chain: list[FollowUp] = []
        for user_len, reply_len in convs[order[s % len(convs)]][:max_turns]:
            user = ids_rng.integers(0, limits.vocab_size, size=max(user_len, 1)).tolist()
            reply = ids_rng.integers(0, limits.vocab_size, size=max(reply_len, 1)).tolist()
            prompt = history + user
            if len(prompt) + len(reply) > limits.max_model_len or total >= count:
                break
            gap = think if dist == "fixed" else float(think_rng.exponential(think)) if think > 0 else 0.0
            if dependent and done:
                chain.append(FollowUp(-1, user, len(reply), chain_gap))
            else:
                prompts.append(prompt)
                outputs.append(len(reply))
                arrivals.append(t)
            chain_gap = gap
            done += 1
            total += 1
            history = prompt + reply
            t += len(reply) * tpot + gap
        for earlier, later in zip(chain, chain[1:]):
            earlier.next = later
        if dependent and done:
            follow_ups.append(chain[0] if chain else None)
        turns_per_conv.append(done)
    if not prompts:
        raise WorkloadError(f"multiturn: no first turn fits max_model_len={limits.max_model_len}")
    meta = {"source": f"table:{TURNS_TABLE}", "conversations": len(turns_per_conv), "num_turns": total,
            "mean_turns": float(np.mean(turns_per_conv)), "dependent": dependent, "real_prompts": False}
    return PromptSet("multiturn", prompts, outputs, meta, arrivals=arrivals,
                     follow_ups=follow_ups if dependent else None)
