"""The allocator contract, checked on every strategy and policy by random operation sequences.

A ``Harness`` drives one allocator like the engine does and keeps a model of each live
sequence (its token ids and the K/V "value" of each position) plus a simulated pool of
values: copy ops are applied, then each new token's value is written at its returned slot.
After every operation every live sequence must read back exactly its own values through its
block table, the usage breakdown must equal one computed independently from the block
tables, and a refusal (LATER / NEVER / None / False) must leave every view unchanged.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from allocators import AllocatorError, CopyOp, Fit, build

MAX_LEN = 48

CONFIGS = (
    [pytest.param("contiguous", dict(num_slots=203, block_size=4, reserve=r, max_model_len=MAX_LEN, double_chunk=4), id=f"contiguous-{r}") for r in ("max", "pow2", "pow2-total", "oracle", "double")]
    + [pytest.param("buddy", dict(num_slots=220, block_size=4, reserve=r, max_model_len=MAX_LEN, double_chunk=4), id=f"buddy-{r}") for r in ("max", "pow2", "pow2-total", "oracle", "double")]
    + [pytest.param("buddy", dict(num_slots=250, block_size=2, reserve="double", max_model_len=MAX_LEN, min_order=2, double_chunk=1), id="buddy-double-min_order2")]
    + [pytest.param("paged", dict(num_slots=n, block_size=bs), id=f"paged-bs{bs}") for n, bs in ((97, 1), (203, 16), (600, 256))]
    + [pytest.param("paged_prefix", dict(num_slots=n, block_size=bs), id=f"paged_prefix-bs{bs}") for n, bs in ((97, 1), (130, 4), (203, 16), (600, 256))]
    + [pytest.param("radix", dict(num_slots=n, block_size=bs), id=f"radix-bs{bs}") for n, bs in ((97, 1), (130, 4), (203, 16))]
    + [pytest.param("radix", dict(num_slots=130, block_size=4, insert_running=False), id="radix-bs4-on-free")]
    + [pytest.param(name, dict(num_slots=130, block_size=4, eviction=e), id=f"{name}-bs4-{e}")
       for name, e in (("paged_prefix", "arc"), ("paged_prefix", "lfu"), ("radix", "arc"), ("radix", "slru"))]
    + [pytest.param("vattention", dict(num_slots=203, block_size=4, page_bytes=64, token_bytes=4, reclaim=r), id=f"vattention-{r}") for r in ("unmap", "pool")]
    + [pytest.param("paged_window", dict(num_slots=n, block_size=bs, window=w), id=f"paged_window-bs{bs}-w{w}") for n, bs, w in ((97, 1, 5), (130, 4, 9), (203, 16, 20))]
)
SHARING = ("paged", "paged_prefix", "radix", "paged_window")
CACHING = ("paged_prefix", "radix")

# prompts share prefixes within a family so that prefix hits happen
FAMILIES = [[(7 * f + 3 * i) % 5 for i in range(MAX_LEN)] for f in range(3)]


def chain(prev: int, token: int) -> int:
    """The K/V value of a token depends on the token and everything before it."""
    return hash((prev, token))


@dataclass
class SeqModel:
    token_ids: list[int]  # every token the sequence will hold, prompt first
    prompt_len: int
    final_len: int
    num_tokens: int = 0
    values: list[int] = field(default_factory=list)

    def value_at(self, pos: int) -> int:
        while len(self.values) <= pos:
            prev = self.values[-1] if self.values else 0
            self.values.append(chain(prev, self.token_ids[len(self.values)]))
        return self.values[pos]


class Harness:
    def __init__(self, name: str, knobs: dict, rng: random.Random | None = None) -> None:
        self.alloc = build(name, debug=True, **knobs)
        self.name = name
        self.bs = self.alloc.block_size
        self.pool: list[int | None] = [None] * self.alloc.num_slots
        self.seqs: dict[int, SeqModel] = {}
        self.next_id = 0
        self.uncommitted: dict[int, list[int]] = {}  # sid -> slots grown since the last commit

    # -- helpers -----------------------------------------------------------------------------
    def finals(self) -> dict[int, int]:
        return {sid: m.final_len for sid, m in self.seqs.items()}

    def snapshot(self):
        a = self.alloc
        extra = [getattr(a, f)() for f in ("holes", "free_lists", "free_blocks") if hasattr(a, f)]
        return (
            sorted(a.live_sequences()),
            {sid: (a.block_table(sid), a.num_tokens(sid)) for sid in a.live_sequences()},
            a.usage(self.finals()),
            a.stats(),
            extra,
        )

    def apply_copies(self) -> list[CopyOp]:
        ops = self.alloc.take_copy_ops()
        for op in ops:
            assert op.length > 0
            self.pool[op.dst : op.dst + op.length] = self.pool[op.src : op.src + op.length]
        return ops

    def oldest_read(self, sid: int) -> int:
        """First position a live sequence must still read back (windowed strategies drop older ones)."""
        window = getattr(self.alloc, "window", None)
        return 0 if window is None else max(0, self.seqs[sid].num_tokens - window)

    def slot(self, sid: int, pos: int, table: list[int] | None = None) -> int:
        table = self.alloc.block_table(sid) if table is None else table
        return table[pos // self.bs] * self.bs + pos % self.bs

    # -- operations --------------------------------------------------------------------------
    def admit(self, prompt: list[int], out_len: int):
        prompt = prompt[: MAX_LEN - 1] or [0]
        final_len = min(len(prompt) + out_len, MAX_LEN)
        tail = [(t * 13 + 1) % 7 for t in range(final_len - len(prompt))]
        sid, self.next_id = self.next_id, self.next_id + 1
        before = self.snapshot()
        r = self.alloc.admit(sid, prompt, MAX_LEN, final_len)
        if not r.ok:
            assert r.fit in (Fit.LATER, Fit.NEVER) and r.reason
            assert self.snapshot() == before, "a refused admit changed the allocator"
            return r
        model = SeqModel(prompt + tail, len(prompt), final_len, r.num_cached_tokens)
        cached = r.num_cached_tokens
        assert cached == 0 or (self.name in CACHING and cached % self.bs == 0 and cached < len(prompt))
        assert self.alloc.num_tokens(sid) == cached
        assert len(self.alloc.block_table(sid)) * self.bs >= len(prompt), "prompt space not allocated"
        self.seqs[sid] = model
        assert self.apply_copies() == []
        table = self.alloc.block_table(sid)
        for pos in range(cached):  # prefix hits must hold exactly this prompt's K/V
            assert self.pool[self.slot(sid, pos, table)] == model.value_at(pos), f"cached position {pos} holds another token"
        return r

    def grow(self, sid: int, n: int, give_ids: bool):
        model = self.seqs[sid]
        t = model.num_tokens
        ids = model.token_ids[t : t + n] if give_ids else None
        before = self.snapshot()
        slots = self.alloc.grow(sid, n, ids)
        if slots is None:
            assert self.snapshot() == before, "a failed grow changed the allocator"
            assert self.alloc.take_copy_ops() == []
            return None
        assert len(slots) == n
        self.apply_copies()
        table = self.alloc.block_table(sid)
        for k, s in enumerate(slots):
            assert s == self.slot(sid, t + k, table), "slot mapping disagrees with the block table"
            self.pool[s] = model.value_at(t + k)
        model.num_tokens = t + n
        self.uncommitted.setdefault(sid, []).extend(slots)
        return slots

    def commit(self) -> None:
        """The step that writes every grown token ran."""
        self.alloc.commit()
        self.uncommitted.clear()

    def fork(self, parent: int):
        child, self.next_id = self.next_id, self.next_id + 1
        pm = self.seqs[parent]
        before = self.snapshot()
        if not self.alloc.fork(parent, child, pm.final_len):
            assert self.snapshot() == before, "a failed fork changed the allocator"
            return False
        self.seqs[child] = SeqModel(list(pm.token_ids), pm.prompt_len, pm.final_len, pm.num_tokens, list(pm.values))
        self.apply_copies()
        return True

    def free(self, sid: int) -> None:
        """Free; tokens grown since the last commit were never written (a roll-back): their
        slots lose their value unless another live sequence computed them."""
        self.alloc.free(sid)
        del self.seqs[sid]
        unwritten = self.uncommitted.pop(sid, [])
        if unwritten:
            held = {self.slot(other, pos) for other, m in self.seqs.items() for pos in range(self.oldest_read(other), m.num_tokens)}
            for slot in unwritten:
                if slot not in held:
                    self.pool[slot] = None

    def bad_inputs(self) -> None:
        before = self.snapshot()
        unknown = self.next_id + 1000
        for call in (
            lambda: self.alloc.free(unknown),
            lambda: self.alloc.grow(unknown, 1),
            lambda: self.alloc.fork(unknown, unknown + 1),
            lambda: self.alloc.block_table(unknown),
        ):
            with pytest.raises(AllocatorError):
                call()
        if self.seqs:
            sid = next(iter(self.seqs))
            with pytest.raises(AllocatorError, match="already live"):
                self.alloc.admit(sid, [1], MAX_LEN, 2)
            with pytest.raises(AllocatorError):
                self.alloc.grow(sid, -1)
            with pytest.raises(AllocatorError, match="max_len"):
                self.alloc.grow(sid, MAX_LEN + 1)
        assert self.snapshot() == before

    # -- checks ------------------------------------------------------------------------------
    def check(self) -> None:
        a = self.alloc
        a.check_invariants()
        assert sorted(a.live_sequences()) == sorted(self.seqs)
        finals = self.finals()
        owners: dict[int, list[tuple[int, int]]] = {}
        for sid, model in self.seqs.items():
            assert a.num_tokens(sid) == model.num_tokens
            table = a.block_table(sid)
            for i, b in enumerate(table):
                if b < 0:  # released by the window: the slots belong to no one
                    assert (i + 1) * self.bs <= self.oldest_read(sid), f"seq {sid} dropped block {i} inside its window"
                    continue
                for off in range(self.bs):
                    owners.setdefault(b * self.bs + off, []).append((sid, i * self.bs + off))
            for pos in range(self.oldest_read(sid), model.num_tokens):
                assert self.pool[self.slot(sid, pos, table)] == model.value_at(pos), f"seq {sid} reads a wrong token at {pos}"
        token = reserved = internal = 0
        for slot, who in owners.items():
            assert 0 <= slot < a.num_slots
            if self.name not in SHARING:
                assert len(who) == 1, f"slot {slot} owned by {who}"
            if any(pos < self.seqs[sid].num_tokens for sid, pos in who):
                token += 1
            elif any(pos < finals[sid] for sid, pos in who):
                reserved += 1
            else:
                internal += 1
        usage = a.usage(finals)
        assert usage.total == a.num_slots
        assert min(usage.token, usage.reserved, usage.internal, usage.external) >= 0
        assert (usage.token, usage.reserved, usage.internal, usage.paper_external) == (token, reserved, internal, a.num_slots - len(owners))
        assert (usage.cached is not None) == (self.name in CACHING)
        stats = a.stats()
        assert stats["logical_slots"] == sum(m.num_tokens for m in self.seqs.values())
        assert stats["physical_slots"] == token
        assert stats["allocated_slots"] == len(owners)

    def drain(self) -> None:
        for sid in list(self.seqs):
            self.free(sid)
        usage = self.alloc.usage({})
        assert usage.paper_external == self.alloc.num_slots, usage
        assert self.alloc.stats()["allocated_slots"] == 0
        self.alloc.check_invariants()


class AllocatorMachine(RuleBasedStateMachine):
    name: str
    knobs: dict

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(self.name, self.knobs)

    @rule(family=st.integers(0, 2), shared=st.integers(0, 40), suffix=st.lists(st.integers(0, 4), max_size=6), out_len=st.integers(0, 20))
    def admit(self, family, shared, suffix, out_len):
        self.h.admit(FAMILIES[family][:shared] + suffix, out_len)

    @precondition(lambda self: self.h.seqs)
    @rule(data=st.data())
    def grow(self, data):
        sid = data.draw(st.sampled_from(sorted(self.h.seqs)))
        model = self.h.seqs[sid]
        n = data.draw(st.integers(0, min(12, model.final_len - model.num_tokens)))
        self.h.grow(sid, n, data.draw(st.booleans()))

    @precondition(lambda self: self.h.seqs)
    @rule(data=st.data())
    def decode_all(self, data):
        for sid, model in list(self.h.seqs.items()):
            if model.num_tokens < model.final_len:
                self.h.grow(sid, 1, True)

    @precondition(lambda self: self.h.seqs)
    @rule(data=st.data())
    def fork(self, data):
        self.h.fork(data.draw(st.sampled_from(sorted(self.h.seqs))))

    @precondition(lambda self: self.h.seqs)
    @rule(data=st.data())
    def free(self, data):
        self.h.free(data.draw(st.sampled_from(sorted(self.h.seqs))))

    @rule()
    def bad_inputs(self):
        self.h.bad_inputs()

    @rule()
    def commit(self):
        self.h.commit()

    @invariant()
    def consistent(self):
        self.h.check()

    def teardown(self):
        self.h.drain()


@pytest.mark.parametrize("name, knobs", CONFIGS)
def test_contract_stateful(name, knobs):
    machine = type(f"Machine_{name}", (AllocatorMachine,), {"name": name, "knobs": knobs})
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)),
    )


@pytest.mark.parametrize("name, knobs", CONFIGS)
def test_random_ops_keep_every_sequence_reading_its_own_tokens(name, knobs):
    """A long seeded run, fork-heavy, under memory pressure: the CoW / move / copy-op check."""
    rng = random.Random(1234)
    h = Harness(name, knobs)
    for _ in range(400):
        op = rng.random()
        if op < 0.25 or not h.seqs:
            fam = rng.randrange(3)
            h.admit(FAMILIES[fam][: rng.randrange(41)] + [rng.randrange(5) for _ in range(rng.randrange(4))], rng.randrange(30))
        elif op < 0.4:
            h.fork(rng.choice(sorted(h.seqs)))
        elif op < 0.5:
            h.free(rng.choice(sorted(h.seqs)))
        elif op < 0.6:
            h.commit()
        else:
            for sid in sorted(h.seqs):
                if sid not in h.seqs:  # preempted below
                    continue
                m = h.seqs[sid]
                left = m.final_len - m.num_tokens
                if left:
                    n = rng.choice([1, 1, 1, min(left, rng.randrange(1, 10))])
                    if h.grow(sid, n, rng.random() < 0.9) is None:  # out of memory: preempt one
                        h.free(rng.choice(sorted(h.seqs)))
                elif rng.random() < 0.5:
                    h.free(sid)
        h.check()
    stats = h.alloc.stats()
    # the run must have exercised what it checks
    if knobs.get("block_size") != 1:  # a shared 1-slot block is always full: never copied
        assert stats["copy_ops"] > 0
    if knobs.get("reserve") == "double":
        assert stats["moves"] > 0
    if name in CACHING and knobs["block_size"] <= 16:
        assert stats["prefix_hits"] > 0 and stats["evictions"] > 0
    if name == "paged_window":
        assert stats["window_freed_slots"] > 0
    h.drain()


# -- final_len is for oracle policies only ---------------------------------------------------
NON_ORACLE = [p for p in CONFIGS if p.values[1].get("reserve", "max") in ("max", "double")]

OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "grow", "fork", "free"]), st.integers(0, 10**6), st.integers(0, 10**6)),
    max_size=60,
)


def trace(alloc, ops, final_for) -> list:
    """Run ``ops`` and record everything the allocator answers."""
    rng_prompts = FAMILIES
    live: dict[int, tuple[int, int]] = {}  # seq -> (final_len, prompt_len)
    out: list = []
    next_id = 0
    for kind, x, y in ops:
        if kind == "admit" or not live:
            prompt = rng_prompts[x % 3][: 1 + x % 40]
            final = min(len(prompt) + y % 20, MAX_LEN)
            r = alloc.admit(next_id, prompt, MAX_LEN, final_for(final))
            out.append(("admit", r.fit, r.num_cached_tokens))
            if r.ok:
                live[next_id] = (final, len(prompt))
            next_id += 1
            continue
        sid = sorted(live)[x % len(live)]
        final, _ = live[sid]
        if kind == "grow":
            left = final - alloc.num_tokens(sid)
            n = y % (left + 1)
            out.append(("grow", alloc.grow(sid, n, [y % 5] * n)))
            alloc.commit()
        elif kind == "fork":
            ok = alloc.fork(sid, next_id, final_for(final))
            out.append(("fork", ok))
            if ok:
                live[next_id] = live[sid]
            next_id += 1
        else:
            alloc.free(sid)
            del live[sid]
        out.append(alloc.take_copy_ops())
        out.append({s: (alloc.block_table(s), alloc.num_tokens(s)) for s in live})
        out.append(alloc.stats())
    return out


@pytest.mark.parametrize("name, knobs", NON_ORACLE)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, shift=st.integers(0, 30))
def test_non_oracle_policies_ignore_final_len(name, knobs, ops, shift):
    truth = trace(build(name, **knobs), ops, lambda f: f)
    assert trace(build(name, **knobs), ops, lambda f: None) == truth
    assert trace(build(name, **knobs), ops, lambda f: f + shift) == truth
