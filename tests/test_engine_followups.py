"""Multi-turn chat through the engine: a turn is released after its predecessor finishes, its
prompt holding the predecessor's prompt and generated tokens, so a prefix cache hits all of it."""
from __future__ import annotations

from allocators import build
from kvbench.engine import Engine, SchedulerConfig
from kvbench.requests import FollowUp, Request
from tests.engine_helpers import TokenPoolExecutor, seq_lookup


def chat(num_users: int = 3, turns: int = 3) -> list[Request]:
    requests, next_id = [], num_users
    for u in range(num_users):
        chain = None
        for t in reversed(range(1, turns)):
            chain = FollowUp(next_id + t - 1, [100 + u, 200 + t, 7], 4 + t, think_s=2.0, next=chain)
        next_id += turns - 1
        requests.append(Request(u, [u + 1] * 10, 5, arrival_s=0.5 * u, follow_up=chain))
    return requests


def run(name: str, **knobs):
    alloc = build(name, 256, debug=True, **knobs)
    executor = TokenPoolExecutor(256)
    engine = Engine(alloc, executor, SchedulerConfig(max_model_len=128), max_steps=2000)
    executor.lookup = seq_lookup(engine)
    return engine.run(chat()), executor


def test_each_turn_extends_the_generated_history_and_waits_for_its_predecessor():
    out, _ = run("paged", block_size=4)
    reqs = out.requests.set_index("request_id")
    assert out.summary["num_finished"] == 9 and sorted(out.outputs) == list(range(9))
    for user in range(3):
        first = reqs.loc[user]
        second = reqs.loc[3 + 2 * user]
        assert second["arrival_s"] == first["finish_s"] + 2.0
        assert second["prompt_len"] == first["prompt_len"] + first["output_len"] + 3


def test_radix_hits_the_whole_history_paged_prefix_its_full_blocks():
    radix, _ = run("radix", block_size=1)
    hashed, _ = run("paged_prefix", block_size=4)
    plain, _ = run("paged", block_size=4)
    assert radix.outputs == plain.outputs == hashed.outputs  # the executor is seeded by batch order only
    assert radix.summary["prefix_hit_rate"] > hashed.summary["prefix_hit_rate"] > 0.4
