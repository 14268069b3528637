"""Multi-turn chat from ShareGPT: each conversation replayed turn by turn, many users interleaved.

Turn t's prompt is the conversation so far (every earlier user message and reply) plus the new
user message, so each turn repeats the previous turn's prompt and reply as its prefix: the
workload where prefix caches earn their keep. Lengths come from the shipped per-turn table
(``data/sharegpt_turns_smollm2.csv``, SmolLM2 tokens, see ``make_turns_table``); token ids are
random (seeded) and fixed per conversation, so a turn's prompt starts with exactly the ids of
the previous turn's prompt and reply.

Timing. Conversations start as the common arrival process says (``request_rate`` is new
conversations per second). The engine cannot make a request wait for another's completion, so
turn t+1 arrives at turn t's arrival + ``reply_len * expected_tpot_s`` (its expected finish)
+ a think time (``think_time_dist`` with mean ``think_time_s``). Under load a turn can thus
arrive before the previous reply finished; its prompt then finds less of the history cached.

Cut to the model: a conversation ends at the first turn whose prompt + reply exceed
max_model_len (or after ``max_turns``). ``num_requests`` counts turns. The engine generates
its own reply ids, which are not the ids the next turn's prompt holds for that reply, so a
prefix cache hits the previous prompt (plus nothing of the generated reply): a lower bound on
what a live chat, whose history holds the generated ids, would hit.
"""
from __future__ import annotations

import csv
import importlib.resources
from typing import Any

import numpy as np

from .common import CommonKnobs, Knobs, ModelLimits, PromptSet, WorkloadError, arrival_times, rng_for

TURNS_TABLE = "sharegpt_turns_smollm2.csv"
THINK_DISTS = ("exponential", "fixed")

DEFAULTS: dict[str, Any] = {
    "max_turns": 8,  # turns replayed per conversation at most
    "think_time_s": 10.0,  # mean user think time between a reply and the next message
    "think_time_dist": "exponential",  # exponential | fixed
    "expected_tpot_s": 0.05,  # seconds per output token used to place the next turn (see docstring)
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
    convs = load_turns()
    order = rng_for(common.seed, "conversations").permutation(len(convs))
    ids_rng, think_rng = rng_for(common.seed, "turn_ids"), rng_for(common.seed, "think")
    starts = arrival_times(common)
    prompts: list[list[int]] = []
    outputs: list[int] = []
    arrivals: list[float] = []
    turns_per_conv: list[int] = []
    for s, start in enumerate(starts):
        if len(prompts) >= count:
            break
        history: list[int] = []
        t = float(start)
        done = 0
        for user_len, reply_len in convs[order[s % len(convs)]][:max_turns]:
            user = ids_rng.integers(0, limits.vocab_size, size=max(user_len, 1)).tolist()
            reply = ids_rng.integers(0, limits.vocab_size, size=max(reply_len, 1)).tolist()
            prompt = history + user
            if len(prompt) + len(reply) > limits.max_model_len or len(prompts) >= count:
                break
            prompts.append(prompt)
            outputs.append(len(reply))
            arrivals.append(t)
            done += 1
            history = prompt + reply
            gap = think if dist == "fixed" else float(think_rng.exponential(think)) if think > 0 else 0.0
            t += len(reply) * tpot + gap
        turns_per_conv.append(done)
    if not prompts:
        raise WorkloadError(f"multiturn: no first turn fits max_model_len={limits.max_model_len}")
    meta = {"source": f"table:{TURNS_TABLE}", "conversations": len(turns_per_conv),
            "mean_turns": float(np.mean(turns_per_conv)), "real_prompts": False}
    return PromptSet("multiturn", prompts, outputs, meta, arrivals=arrivals)
