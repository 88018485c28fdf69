"""Tenants share the pin budget (docs/design.md, "Scheduling"): a program's tenant is read from
its namespaced id; the active tenants have equal shares; a pin that fits the free budget is
granted, else a tenant within its share displaces the latest pins of the tenant furthest over
its share (``Finished.released``), and ``reclaim`` takes from that tenant first."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity import assert_same, outcome
from parity import scheduler_snapshot as snapshot
from ttlpolicy import PolicyConfig
from ttlpolicy.ids import MAX_PROGRAM_ID_CHARS, program_key, tenant_key, tenant_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import tenant_shares


def key(tenant: str) -> str:
    out = tenant_key(tenant)
    assert out is not None
    return out


A, B, C = key("A"), key("B"), key("C")
MISS_S = 100.0  # the cold policy pins every turn at this miss cost


def pid(tenant: str | None, i: int) -> str:
    return program_key(tenant, f"p{i}")


class Turns:
    """Finishes whole turns (arrive, run, finish) of programs on one scheduler."""

    def __init__(self, impl: Any, budget: int, weights: dict[str, int] | None = None) -> None:
        self.s = impl.ProgramScheduler(
            impl.TTLPolicy(PolicyConfig()), 10 * budget, budget, tenant_weights=weights
        )
        self.seq = 0

    def turn(self, program: str, blocks: int = 10, now: float = 0.0) -> Any:
        self.seq += 1
        rid = f"r{self.seq}"
        self.s.arrive(rid, program, now, blocks)
        assert self.s.pop(now) == rid
        return self.s.finish(rid, now, blocks, tool="bash", cache_miss_cost_s=MISS_S)


def owners(pins: Any) -> list[str]:
    return [tenant_of(p.program_id) for p in pins]


# -- the tenant of an id -----------------------------------------------------------------------
@given(st.text(min_size=1, max_size=MAX_PROGRAM_ID_CHARS), st.text(min_size=1, max_size=40))
def test_a_namespaced_id_names_its_tenant_and_a_client_id_none(program_id, tenant):
    key = tenant_key(tenant)
    assert key is not None
    assert tenant_of(program_key(key, program_id)) == key  # long ids too (digested in place)
    if program_id.isprintable():  # what ids.program_info lets through
        assert tenant_of(program_id) == ""


def test_near_namespaces_are_the_shared_tenant():
    assert tenant_of(pid(A, 1)) == A
    for near in ("\x00t:" + A, "\x00t:" + A.upper() + ":p", "\x00t:" + A[:-1] + ":p",
                 "\x00t:" + A[:-1] + "g:p", "\x00u:" + A + ":p", "t:" + A + ":p"):  # fmt: skip
        assert tenant_of(near) == ""


# -- shares ------------------------------------------------------------------------------------
def test_a_tenant_under_its_share_takes_budget_back_from_the_one_over_it(impl):
    t = Turns(impl, 100)
    for i in range(10):  # A alone: all the budget is its share (work-conserving)
        assert t.turn(pid(A, i)).pinned
    assert t.s.pinned_blocks == 100
    done = t.turn(pid(B, 0), blocks=15)  # B: share 50 -> A's two latest programs go
    assert done.pinned
    assert [p.program_id for p in done.released] == [pid(A, 9), pid(A, 8)]
    assert t.s.pinned_blocks == 95 and t.s.pin(pid(A, 9)) is None


def test_a_tenant_at_its_share_gets_no_pin_beyond_it(impl):
    t = Turns(impl, 100)
    for i in range(5):
        assert t.turn(pid(B, i)).pinned
    for i in range(5):
        assert t.turn(pid(A, i)).pinned  # fits the free budget
    done = t.turn(pid(A, 5))  # full; A at its share 50: no pin, B keeps everything
    assert not done.pinned and done.released == ()
    assert sorted(owners(t.s.pins())) == sorted([A] * 5 + [B] * 5)


def test_a_flood_never_takes_a_tenants_pins_within_its_share(impl):
    t = Turns(impl, 100)
    kept = [pid(B, i) for i in range(3)]
    for p in kept:
        t.turn(p)
    for i in range(300):
        done = t.turn(pid(A, i), now=i * 0.01)
        assert B not in owners(done.released)
    assert all(t.s.pin(p) is not None for p in kept)
    assert t.turn(pid(B, 3), now=3.0).pinned  # and B's next pin takes A's budget back


def test_reclaim_takes_from_the_tenant_furthest_over_its_share_first(impl):
    t = Turns(impl, 100)
    for i in range(7):
        t.turn(pid(A, i))
    for i in range(3):
        t.turn(pid(B, i))  # B arrived last: before shares, reclaim took B's pins first
    out = t.s.reclaim(30, 0.0)
    # A is over its share (70 of 100 between two): its latest two, then A at 50 is not over
    # and the latest program goes (B's)
    assert [p.program_id for p in out] == [pid(A, 6), pid(A, 5), pid(B, 2)]


def test_three_tenants_share_by_thirds(impl):
    t = Turns(impl, 90)
    for i in range(9):
        t.turn(pid(A, i))
    t.turn(pid(B, 0))  # B: share 45: takes A's latest
    done = t.turn(pid(C, 0), blocks=20)  # C: share 30 -> A (80) is furthest over
    assert owners(done.released) == [A, A]
    assert t.s.pinned_blocks <= 90


# -- weights -----------------------------------------------------------------------------------
def blocks_of(s: Any, tenant: str) -> int:
    return sum(p.blocks for p in s.pins() if tenant_of(p.program_id) == tenant)


@pytest.mark.parametrize(("weights", "kept"), [(None, (50, 40)), ({A: 2}, (60, 30))])
def test_a_weighted_tenant_keeps_its_larger_share(impl, weights, kept):
    """Budget 90; A pins all of it alone, then B pins turn after turn: B takes A's pins until
    A is down to its share — 45 blocks with equal weights (50: pins of 10), 60 when A
    weighs 2 (B's share 30) — and gets no pin beyond its own."""
    t = Turns(impl, 90, weights)
    for i in range(9):
        assert t.turn(pid(A, i)).pinned
    for i in range(6):
        t.turn(pid(B, i))
    assert (blocks_of(t.s, A), blocks_of(t.s, B)) == kept


@pytest.mark.parametrize(("weights", "first"), [(None, A), ({A: 3}, B)])
def test_reclaim_takes_from_the_tenant_furthest_over_its_weighted_share(impl, weights, first):
    """A holds 60 blocks, B 30 of 90.  Equal weights: A is over its share (45) and goes first;
    A weighing 3: A's share is 67.5, B's 22.5 — B is the one over it."""
    t = Turns(impl, 90, weights)
    for i in range(6):
        t.turn(pid(A, i))
    for i in range(3):
        t.turn(pid(B, i))
    assert owners(t.s.reclaim(10, 0.0)) == [first]


BAD_WEIGHTS = [
    "A=2",
    [(A, 2)],
    {5: 1},
    {A: 1.5},
    {A: "2"},
    {A: 0},
    {A: -3},
    {A: 1001},
    {A: 2**70},
    {"tenantA": 2},
    {A.upper(): 2},
    {A: 2, "x" * 200: 2},
    {A: 2, B: 0, C: 1.5},  # types first: the float, not B's 0
    {f"{i:032x}": 1 for i in range(1025)},
]


def built(backends: Any, total_blocks: int, weights: Any) -> list[Any]:
    """What constructing a scheduler with ``tenant_weights=weights`` gives on each backend."""
    return [
        outcome(
            partial(
                b.ProgramScheduler,
                b.TTLPolicy(PolicyConfig()),
                total_blocks,
                10,
                tenant_weights=weights,
            )
        )
        for b in backends
    ]


@pytest.mark.parametrize("weights", BAD_WEIGHTS, ids=range(len(BAD_WEIGHTS)))
def test_bad_weights_are_refused_alike_naming_the_field_and_value(backends, weights):
    results = built(backends, 100, weights)
    assert_same(results[0], results[1])
    kind, (error, message) = results[0]
    assert kind == "raised" and error in (TypeError, ValueError)
    assert message.startswith("tenant_weights must be")


def test_an_earlier_bad_argument_is_reported_first(backends):
    results = built(backends, 0, "bad")
    assert_same(results[0], results[1])
    assert results[0][1][1].startswith("total_blocks")


def test_weights_of_inactive_tenants_change_nothing(impl):
    """A table naming tenants that never come: the shares of those active are as without."""
    absent = {key(f"absent{i}"): 1000 for i in range(5)}
    runs = []
    for weights in (None, absent):
        t = Turns(impl, 90, weights)
        for i in range(9):
            t.turn(pid(A, i))
        runs.append([p.program_id for p in t.turn(pid(B, 0), blocks=30).released])
    assert runs[0] == runs[1] and runs[0]


# -- properties --------------------------------------------------------------------------------
PROGRAMS = [pid(tn, i) for tn in (None, A, B) for i in range(3)] + [
    "\x00t:" + C.upper() + ":p",  # not a namespace: the shared tenant
    program_key(C, "é" * MAX_PROGRAM_ID_CHARS),  # digested, still C's
]
ops = st.one_of(
    st.tuples(st.just("turn"), st.sampled_from(PROGRAMS), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("arrive"), st.sampled_from(PROGRAMS), st.integers(0, 40)),
    st.tuples(st.just("reclaim"), st.integers(0, 60), st.sampled_from([None, *PROGRAMS])),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 30.0])),
    st.tuples(st.just("end"), st.sampled_from(PROGRAMS)),
)


def apply(s: Any, now: float, op: tuple, step: int) -> Any:
    kind = op[0]
    if kind == "turn":
        _, program, blocks, last = op
        rid = f"t{step}"
        s.arrive(rid, program, now, blocks)
        ran = s.pop_many(100, now)  # (other waiting requests run, and stay running)
        before = s.pinned_blocks
        done = s.finish(rid, now, blocks, tool="bash", last_turn=last, cache_miss_cost_s=MISS_S)
        return ran, before, done
    if kind == "arrive":
        return s.arrive(f"a{step}", op[1], now, op[2])
    if kind == "reclaim":
        return s.reclaim(op[1], now, for_program=op[2])
    if kind == "tick":
        return s.expire(now)
    return s.end_program(op[1])


WEIGHTS = [None, {A: 2}, {A: 1, B: 3, C: 5}, {B: 1000}]


@given(
    st.lists(ops, min_size=5, max_size=60),
    st.sampled_from(["default", "published"]),
    st.sampled_from(WEIGHTS),
)
def test_backends_agree_with_tenants(backends, seq, model, weights):
    config = PolicyConfig() if model == "default" else PolicyConfig.published()
    states = [b.ProgramScheduler(b.TTLPolicy(config), 400, 60, tenant_weights=weights)
              for b in backends]  # fmt: skip
    now = 0.0
    for step, op in enumerate(seq):
        if op[0] == "tick":
            now += op[1]
        results = [outcome(partial(apply, s, now, op, step)) for s in states]
        assert_same(results[0], results[1], f"{op}")
        assert_same(snapshot(states[0]), snapshot(states[1]), f"views after {op}")


@given(st.lists(ops, min_size=5, max_size=60), st.booleans(), st.sampled_from(WEIGHTS))
def test_shares_invariants(impl, seq, one_tenant, weights):
    """The budget holds; a pin that fits the free budget is granted and displaces nobody; a
    finish displaces only other tenants' pins, and only to pin; with one tenant (all ids
    shared, or all of one tenant) nothing is ever displaced — the scheduler before shares,
    whatever the weights."""
    budget = 60
    s = impl.ProgramScheduler(impl.TTLPolicy(PolicyConfig()), 400, budget, tenant_weights=weights)
    now = 0.0
    for step, op in enumerate(seq):
        if one_tenant and op[0] in ("turn", "arrive", "end") and tenant_of(op[1]) != A:
            op = (op[0], program_key(A, op[1]), *op[2:])
        if op[0] == "tick":
            now += op[1]
        try:
            result = apply(s, now, op, step)
        except (KeyError, ValueError):
            continue
        assert s.pinned_blocks <= budget
        if op[0] != "turn":
            continue
        _, before, done = result
        if done.decision is None or done.decision.ttl_s <= 0.0:
            assert not done.pinned and done.released == ()
            continue
        if before + op[2] <= budget:
            assert done.pinned and done.released == ()
        if done.released:
            assert done.pinned
            assert tenant_of(op[1]) not in owners(done.released)
        if one_tenant:
            assert done.released == ()
            assert done.pinned == (before + op[2] <= budget)


# -- the target --------------------------------------------------------------------------
def test_a_flood_of_20000_programs_leaves_another_tenant_its_hit_rate(impl):
    """With one tenant flooding 20,000 programs, another keeps its pins: its hit rate within
    1 point of what it gets alone (bench/tenant_shares.py; in one pool it loses them)."""
    alone = tenant_shares.victim_hit_rate(impl, 0)
    flooded = tenant_shares.victim_hit_rate(impl, 20_000)
    one_pool = tenant_shares.victim_hit_rate(impl, 20_000, tenants=False)
    assert alone > 0.5
    assert abs(flooded - alone) <= 0.01
    assert one_pool < alone - 0.1  # the scenario does flood: without tenants it hurts
