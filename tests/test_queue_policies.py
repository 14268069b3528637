"""Scheduling and preemption policies (``engine.policy``, ``engine.preemption_victim``): each
queue order and victim choice pinned on small hand-made queues, aging on a starving stream,
the returning place of a preempted request, the policy metrics, workload priorities and the
pre-check's refusals."""
from __future__ import annotations

import gzip
import math
import re

import pytest

from allocators import build
from kvbench.batch import BatchCounts
from kvbench.engine import Engine, SchedulerConfig
from kvbench.engine.scheduler import Scheduler
from kvbench.engine.policy_metrics import jain_index
from kvbench.engine.queue_orders import make_queue_order
from kvbench.engine.sequence import Group, Seq
from kvbench.engine.victims import make_victim_choice
from kvbench.requests import Request
from kvbench.workloads import WorkloadError, build_workload
from tests.engine_helpers import TokenPoolExecutor, checked_run, make_requests, seq_lookup
from tests.test_app import composed, kvbench


def group(rid: int, arrival: float, prompt_len: int = 4, output_len: int = 8, priority: int | None = None,
          computed: int = 0, prompt: list[int] | None = None) -> Group:
    request = Request(rid, prompt if prompt is not None else [rid] * prompt_len, output_len, arrival, priority=priority)
    seq = Seq(rid, list(request.prompt_ids))
    seq.num_computed = computed
    return Group(request, [seq])


def ids(groups) -> list[int]:
    return [g.request_id for g in groups]


# -- queue orders --------------------------------------------------------------------------
QUEUE = [group(0, 0.0, output_len=50, priority=2), group(1, 1.0, output_len=5, priority=0),
         group(2, 2.0, output_len=20, priority=1), group(3, 3.0, output_len=5, priority=0)]


def test_fcfs_never_reorders():
    order = make_queue_order("fcfs", build("paged", 64, block_size=4))
    assert not order.reorders


def test_priority_orders_by_class_then_arrival():
    order = make_queue_order("priority", build("paged", 64, block_size=4))
    assert ids(order.arrange(reversed(QUEUE), now=3.0)) == [1, 3, 2, 0]


def test_sjf_orders_by_remaining_output_with_true_lengths():
    order = make_queue_order("sjf", build("paged", 64, block_size=4))
    assert ids(order.arrange(QUEUE, now=3.0)) == [1, 3, 2, 0]
    back = group(4, 0.5, output_len=30)  # preempted after 28 of 30 tokens: 2 left, goes first
    back.seqs[0].num_generated = 28
    assert ids(order.arrange([*QUEUE, back], now=3.0)) == [4, 1, 3, 2, 0]


def test_sjf_with_a_noisy_predictor_is_seeded_and_can_misorder():
    alloc = build("paged", 64, block_size=4)
    queue = [group(i, float(i), output_len=10 + i) for i in range(12)]  # true order = arrival order
    noisy = make_queue_order("sjf", alloc, sjf_error=1.0, seed=3)
    again = make_queue_order("sjf", alloc, sjf_error=1.0, seed=3)
    got = ids(noisy.arrange(queue, now=20.0))
    assert got == ids(again.arrange(queue, now=20.0))  # one prediction per request and seed
    assert got != list(range(12))  # lengths 10..21 under sigma 1 are not kept in order
    assert ids(make_queue_order("sjf", alloc, sjf_error=0.0).arrange(reversed(queue), now=20.0)) == list(range(12))


def test_lpm_puts_the_longest_cached_prefix_first():
    alloc = build("paged_prefix", 64, block_size=4)
    shared = list(range(100, 112))  # 12 tokens: three blocks
    alloc.admit(99, shared + [7], 64)
    alloc.grow(99, 13, shared + [7])
    alloc.commit()
    alloc.free(99)  # its full blocks stay cached
    queue = [group(0, 0.0, prompt=[1] * 13), group(1, 1.0, prompt=shared[:8] + [2] * 5),
             group(2, 2.0, prompt=shared + [3]), group(3, 3.0, prompt=[4] * 13)]
    assert [alloc.cached_prefix_len(g.seqs[0].tokens) for g in queue] == [0, 8, 12, 0]
    order = make_queue_order("lpm", alloc)
    assert ids(order.arrange(queue, now=3.0)) == [2, 1, 0, 3]
    assert ids(make_queue_order("lpm", build("paged", 64, block_size=4)).arrange(reversed(queue), now=3.0)) == [0, 1, 2, 3]


@pytest.mark.parametrize("policy", ["priority", "sjf", "lpm"])
def test_aging_puts_those_past_the_bound_first_oldest_first(policy):
    alloc = build("paged", 64, block_size=4)
    order = make_queue_order(policy, alloc, max_wait_s=1.5)
    # at t=3.0 groups 0 (3 s) and 1 (2 s) waited past 1.5 s; 2 and 3 keep the policy's order
    assert ids(order.arrange(reversed(QUEUE), now=3.0))[:2] == [0, 1]
    unaged = make_queue_order(policy, alloc).arrange(reversed(QUEUE), now=3.0)
    assert ids(order.arrange(reversed(QUEUE), now=3.0))[2:] == [g for g in ids(unaged) if g in (2, 3)]


# -- victims -------------------------------------------------------------------------------
VICTIMS = ("newest", "lowest_priority", "least_computed", "most_blocks")


def test_each_victim_choice_on_a_hand_made_running_queue():
    alloc = build("paged", 64, block_size=4)
    running = [group(0, 0.0, priority=1, computed=9), group(1, 1.0, priority=0, computed=2),
               group(2, 2.0, priority=1, computed=5), group(3, 3.0, priority=0, computed=2)]
    blocks = {0: 3, 1: 5, 2: 1, 3: 2}  # tables of 3, 5, 1 and 2 blocks
    for g in running:
        alloc.admit(g.seqs[0].seq_id, [0] * (4 * blocks[g.request_id]), 64)
    pick = {name: make_victim_choice(name, alloc).pick(running).request_id
            for name in ("newest", "lowest_priority", "least_computed", "most_blocks")}
    assert pick == {"newest": 3, "lowest_priority": 2, "least_computed": 3, "most_blocks": 1}
    assert make_victim_choice("least_computed", alloc).pick(running[:3]).request_id == 1


def test_most_blocks_counts_a_block_its_samples_share_once():
    """Three samples forked from one 2-block prompt hold 2 blocks (6 table entries): preempting
    them frees less than a single request of 3 blocks, so that request is the victim."""
    alloc = build("paged", 64, block_size=4)
    samples = Group(Request(0, [7] * 8, 8, 0.0, n=3), [Seq(10, [7] * 8), Seq(11, [7] * 8), Seq(12, [7] * 8)])
    alloc.admit(10, [7] * 8, 64)
    alloc.grow(10, 8, [7] * 8)
    alloc.fork(10, 11)
    alloc.fork(10, 12)
    single = group(1, 0.0, prompt_len=12)  # older: without the count it would lose no tie
    alloc.admit(1, [1] * 12, 64)
    assert make_victim_choice("most_blocks", alloc).pick([single, samples]).request_id == 1


def test_most_blocks_takes_a_group_not_reached_yet_before_the_grower():
    """The group out of memory (the grower) is the oldest, least urgent, and holds the most
    blocks and the fewest computed tokens. ``most_blocks`` takes the biggest group the step has
    not reached yet; with none left, the biggest of all (the grower, or one scheduled before
    it). The other choices rank all groups."""
    alloc = build("paged", 64, block_size=4)
    grower = group(0, 0.0, priority=5, computed=1)
    running = [grower, group(1, 1.0, priority=0, computed=9), group(2, 2.0, priority=0, computed=6)]
    alloc.admit(0, [0] * 16, 64)  # 4 blocks
    alloc.admit(1, [1] * 4, 64)  # 1 block
    alloc.admit(2, [2] * 8, 64)  # 2 blocks
    choose = {name: make_victim_choice(name, alloc).choose(grower, running).request_id for name in VICTIMS}
    assert choose == {"newest": 2, "lowest_priority": 0, "least_computed": 0, "most_blocks": 2}
    most_blocks = make_victim_choice("most_blocks", alloc)
    assert most_blocks.choose(running[2], running).request_id == 0  # reached last: the biggest of all
    assert most_blocks.choose(running[1], running[:2]).request_id == 0
    assert most_blocks.choose(grower, [grower]).request_id == 0


def test_the_oldest_group_with_the_most_blocks_keeps_its_place_under_most_blocks():
    """A (prompt 16: 4 blocks) and B (prompt 8: 2 blocks) fill a 6-block pool; in the next step A
    needs a fifth block first. ``most_blocks`` once made A its own victim (it holds the most),
    so a group that just came back lost its place to every newer one; now B gives way."""
    alloc = build("paged", 24, block_size=4)
    engine = Engine(alloc, TokenPoolExecutor(24), SchedulerConfig(max_model_len=64, preemption_victim="most_blocks"))
    sched = engine.scheduler
    for r in [Request(0, [1] * 16, 8, 0.0), Request(1, [2] * 8, 8, 0.1)]:
        sched.add(engine._new_group(r))
    sched.schedule()
    for g in sched.running:
        g.seqs[0].tokens.append(0)
        g.seqs[0].num_generated += 1
    sched.now = 1.0
    batch = sched.schedule()
    assert sched.num_preemptions == 1
    assert ids(sched.running) == [0] and ids(sched.waiting) == [1]
    assert [(c.request_id, c.start_pos) for c in batch.chunks] == [(0, 16)]
    alloc.check_invariants()


def test_unknown_names_raise():
    alloc = build("paged", 64, block_size=4)
    with pytest.raises(ValueError, match="engine.policy"):
        make_queue_order("random", alloc)
    with pytest.raises(ValueError, match="engine.preemption_victim"):
        make_victim_choice("oldest", alloc)



@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("victim", VICTIMS)
@pytest.mark.parametrize("policy", ["fcfs", "priority", "sjf"])
def test_every_policy_runs_correct_under_pressure(policy, victim, preemption, monkeypatch):
    """Every request reads back its own tokens and finishes with all of them (the token pool),
    victims taken back after they were scheduled in their step among them (never with newest)."""
    taken_back = []
    unschedule = Scheduler._unschedule

    def counted(self, group, chunks, counts):
        out = unschedule(self, group, chunks, counts)
        taken_back.append(out[1])
        return out

    monkeypatch.setattr(Scheduler, "_unschedule", counted)
    specs = [(6 + 3 * (i % 5), 5 + 2 * (i % 4), 0.2 * i) for i in range(14)]
    requests = [Request(r.request_id, r.prompt_ids, r.output_len, r.arrival_s, priority=r.request_id % 3)
                for r in make_requests(specs, seed=4)]
    out = checked_run("paged", {}, 48, requests, policy=policy, preemption_victim=victim, preemption=preemption,
                      swap_slots=64 if preemption == "swap" else 0, max_wait_s=4.0)
    assert out.summary["num_finished"] == len(requests)
    assert out.summary["num_preemptions"] > 0
    if preemption == "recompute":
        assert out.summary["preempt_lost_tokens"] > 0
    if victim == "newest":
        assert not taken_back
    elif victim in ("least_computed", "most_blocks"):  # this stream makes them reach back
        assert sum(taken_back) > 0


# -- a victim already scheduled in the step ----------------------------------------------
def _step_with_a_preemption(victim: str, preemption: str):
    """Three running requests on a 7-block pool (4-token blocks): A (prompt 12, priority 1), B
    (prompt 3, priority 0) and C (prompt 8, priority 0). After their prefills (6 blocks) each has
    sampled one token; in the next step A takes the last block, B decodes in its own block and C
    is out of memory, after A and B were scheduled. Returns the scheduler, the batch and the
    sequences' computed tokens before that step."""
    alloc = build("paged", 28, block_size=4)
    engine = Engine(alloc, TokenPoolExecutor(28), SchedulerConfig(
        max_model_len=64, preemption_victim=victim, preemption=preemption,
        swap_slots=64 if preemption == "swap" else 0))
    sched = engine.scheduler
    for r in [Request(0, [1] * 12, 8, 0.0, priority=1), Request(1, [2] * 3, 8, 0.1, priority=0),
              Request(2, [3] * 8, 8, 0.2, priority=0)]:
        sched.add(engine._new_group(r))
    first = sched.schedule()
    assert sorted(c.request_id for c in first.chunks) == [0, 1, 2] and not sched.preempted_now
    for g in sched.running:
        seq = g.seqs[0]
        seq.tokens.append(0)
        seq.num_generated += 1
    before = {g.request_id: g.seqs[0].num_computed for g in sched.running}
    sched.now = 1.0
    return sched, alloc, sched.schedule(), before


def _fresh_counts(batch) -> BatchCounts:
    counts = BatchCounts()
    for rid in dict.fromkeys(c.request_id for c in batch.chunks):
        counts.add([c for c in batch.chunks if c.request_id == rid], batch.block_size)
    return counts


# victim -> (preempted request, requests in the batch): newest is C itself (out of memory, not
# scheduled); the others pick a request scheduled earlier in the same step
SCHEDULED_VICTIMS = {"newest": (2, [0, 1]), "least_computed": (1, [0, 2]), "most_blocks": (0, [1, 2]),
                     "lowest_priority": (0, [1, 2])}


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("victim", SCHEDULED_VICTIMS)
def test_a_victim_scheduled_earlier_in_the_step_gives_its_chunks_back(victim, preemption):
    sched, alloc, batch, before = _step_with_a_preemption(victim, preemption)
    preempted, kept = SCHEDULED_VICTIMS[victim]
    assert sched.num_preemptions == 1 and sched.preempted_now
    assert [c.request_id for c in batch.chunks] == kept  # the victim's chunk is gone, in order
    assert batch.counts == _fresh_counts(batch)  # the step's sums are those of the chunks left
    assert ids(sched.sampled_groups) == kept
    assert ids(sched.running) == kept
    gone = next(g for g in [*sched.waiting, *sched.swapped] if g.request_id == preempted)
    seq = gone.seqs[0]
    if preemption == "recompute":
        assert ids(sched.waiting) == [preempted] and seq.num_computed == 0
        assert sched.lost_tokens == gone.lost_tokens == before[preempted]  # its undone token is not lost
    else:
        assert ids(sched.swapped) == [preempted] and sched.lost_tokens == 0
        assert sched.host_tokens == {seq.seq_id: before[preempted]} and seq.num_computed == before[preempted]
        assert [len(op.slots) for op in batch.swap_out] == [before[preempted]]
    for c in batch.chunks:  # the others computed their one token
        assert c.query_len == 1 and c.start_pos == before[c.request_id]
    alloc.check_invariants()


def test_least_computed_loses_fewer_tokens_than_newest_here():
    specs = [(20, 30, 0.0), (20, 30, 0.0), (4, 30, 3.0)]  # the newest arrives late with few tokens
    out = {v: checked_run("paged", {}, 64, make_requests(specs, seed=5), preemption_victim=v) for v in
           ("newest", "least_computed", "most_blocks")}
    lost = {v: o.summary["preempt_lost_tokens"] for v, o in out.items()}
    assert lost["least_computed"] <= lost["newest"]


# -- a preempted request's place -----------------------------------------------------------
def _drive_to_first_preemption(keep: bool) -> list[int]:
    alloc = build("paged", 12, block_size=4)  # 3 blocks
    engine = Engine(alloc, TokenPoolExecutor(12), SchedulerConfig(max_num_seqs=2, max_model_len=64,
                                                                    keep_arrival_order=keep))
    sched = engine.scheduler
    for r in [Request(0, [1, 2, 3, 4], 8, 0.0), Request(1, [5, 6, 7, 8], 8, 0.0), Request(2, [9, 9, 9, 9], 8, 0.1)]:
        sched.add(engine._new_group(r))
    batch = sched.schedule()  # 0 and 1 prefill one block each; 2 waits (max_num_seqs)
    assert sorted(c.request_id for c in batch.chunks) == [0, 1]
    for group in sched.running:  # each samples one token
        seq = group.seqs[0]
        seq.tokens.append(0)
        seq.num_generated += 1
    sched.now = 1.0
    sched.schedule()  # 0 takes the last block; 1 is out of memory and preempted (newest)
    assert sched.num_preemptions == 1
    return ids(sched.waiting)


def test_a_preempted_request_keeps_its_place_by_default():
    assert _drive_to_first_preemption(keep=True) == [1, 2]


def test_without_keep_order_it_returns_at_the_back():
    assert _drive_to_first_preemption(keep=False) == [2, 1]


# -- aging on a starving stream ------------------------------------------------------------
def _starving(max_wait_s):
    """A short job every second for a minute and one long job at 0.5 s, one at a time: shortest
    first serves the stream and starves the long job unless it ages."""
    specs = [(4, 30, 0.5)] + [(4, 2, float(i)) for i in range(60)]
    requests = make_requests(specs, seed=6)
    out = checked_run("paged", {}, 256, requests, policy="sjf", max_num_seqs=1, max_wait_s=max_wait_s)
    return out.requests.set_index("request_id").loc[0, "queue_wait_s"], out.summary


def test_sjf_starves_a_long_job_without_aging_and_not_with_it():
    starved, summary = _starving(None)
    assert starved > 50  # it waits out the whole stream
    assert summary["num_waited_over_bound"] is None  # no bound: not applicable
    aged, summary = _starving(5.0)
    assert aged <= 5.0 + 3  # admitted once the short job running when it aged finishes
    assert summary["num_waited_over_bound"] >= 1 and summary["aging_bound_s"] == 5.0


# -- metrics -------------------------------------------------------------------------------
def test_jain_index():
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) is None


def test_policy_columns_are_null_where_they_do_not_apply():
    out = checked_run("paged", {}, 1024, make_requests([(4, 3), (5, 4)], seed=7))
    s = out.summary
    assert s["num_preemptions"] == 0 and s["preempt_lost_tokens"] == 0
    assert s["preempt_lost_tokens_per_preempted"] is None
    assert s["num_waited_over_bound"] is None and s["num_priority_classes"] is None
    assert s["policy"] == "fcfs" and s["preemption_victim"] == "newest" and s["sjf_error"] is None
    assert 0 < s["jain_fairness_normalized_latency"] <= 1
    assert list(out.requests["priority"]) == [None, None]


def test_per_priority_class_latency_columns():
    requests = [Request(r.request_id, r.prompt_ids, r.output_len, r.arrival_s, priority=r.request_id % 2)
                for r in make_requests([(4, 3)] * 6, seed=8)]
    s = checked_run("paged", {}, 1024, requests, policy="priority").summary
    assert s["num_priority_classes"] == 2 and s["prio0_num_finished"] == 3 and s["prio1_num_finished"] == 3
    assert s["prio0_p50_ttft_s"] <= s["prio1_p50_ttft_s"]
    assert all(math.isfinite(s[f"prio{k}_p99_e2e_s"]) for k in (0, 1))


# -- workload priorities -------------------------------------------------------------------
WL = {"name": "synthetic", "num_requests": 400, "seed": 1}


def test_priority_shares_draw_classes_and_leave_the_stream_alone():
    plain = build_workload(WL, vocab_size=1000, max_model_len=2048, tokenizer_name=None).requests
    drawn = build_workload({**WL, "priority_shares": [0.25, 0.75]}, vocab_size=1000, max_model_len=2048,
                           tokenizer_name=None).requests
    assert [(r.prompt_ids, r.output_len, r.arrival_s) for r in plain] == \
        [(r.prompt_ids, r.output_len, r.arrival_s) for r in drawn]
    assert all(r.priority is None for r in plain)
    share = sum(r.priority == 0 for r in drawn) / len(drawn)
    assert 0.18 < share < 0.32 and {r.priority for r in drawn} == {0, 1}


@pytest.mark.parametrize("shares", [[0.5, 0.6], [-0.1, 1.1], "half", []])
def test_bad_priority_shares(shares):
    with pytest.raises(WorkloadError, match="priority_shares"):
        build_workload({**WL, "priority_shares": shares}, vocab_size=1000, max_model_len=2048, tokenizer_name=None)


def _trace(tmp_path, with_priority: bool):
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens" + (",tier" if with_priority else "")]
    rows += [f"{0.5 * i},{10 + i},{5 + i}" + (f",{i % 3}" if with_priority else "") for i in range(9)]
    path = tmp_path / "trace.csv.gz"
    path.write_bytes(gzip.compress("\n".join(rows).encode()))
    return str(path)


def test_a_trace_priority_field_is_read_and_a_missing_one_is_named(tmp_path):
    wl = {"name": "azure_conv", "path": _trace(tmp_path, True), "priority_field": "tier"}
    requests = build_workload(wl, vocab_size=1000, max_model_len=2048, tokenizer_name=None).requests
    assert [r.priority for r in requests] == [i % 3 for i in range(9)]
    with pytest.raises(WorkloadError, match="priority_field.*no column 'tier'"):
        build_workload({**wl, "path": _trace(tmp_path, False)}, vocab_size=1000, max_model_len=2048,
                       tokenizer_name=None)


# -- the pre-check -------------------------------------------------------------------------
BAD = [
    ("engine.policy=random", "engine.policy"),
    ("engine.preemption_victim=oldest", "engine.preemption_victim"),
    ("engine.policy=priority", "engine.policy=priority needs a priority"),
    ("engine.preemption_victim=lowest_priority workload=azure_conv", "workload.priority_field"),
    ("engine.policy=sjf engine.sjf_error=-0.5", "engine.sjf_error"),
    ("engine.policy=lpm engine.max_wait_s=0", "engine.max_wait_s"),
    ("engine.max_wait_s=-3", "engine.max_wait_s"),
]


@pytest.mark.parametrize("override,needle", BAD)
def test_the_pre_check_refuses_bad_policy_input_naming_the_key(tmp_path, override, needle):
    from kvbench.run.prepare import _errors
    from kvbench.run.precheck import check_job

    cfg = composed([*override.split(), "workload.num_requests=5", f"results_dir={tmp_path / 'r'}"])
    with pytest.raises(_errors(), match=re.escape(needle)):
        check_job(cfg)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("override,needle", [BAD[0], BAD[2]])
def test_bad_policy_input_exits_2_with_one_line_and_writes_nothing(tmp_path, override, needle):
    proc = kvbench(*override.split(), "workload.num_requests=5", f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("kvbench: error:"), lines
    assert not (tmp_path / "r").exists() and not (tmp_path / "outputs").exists()
