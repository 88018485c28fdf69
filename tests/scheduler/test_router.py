"""ProgramRouter's rules, on both backends: a returning call stays with its live pin when
the wait there is zero, leaves when the wait costs more than a miss elsewhere; a new program
goes where it fits beside the working set; a drained instance releases its programs and is
never routed to; bounded tables; bad input refused by field, before any change."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig

INSTANCES = ["i0", "i1", "i2", "i3"]


def build(impl: Any, max_programs: int = 64) -> Any:
    policy = impl.TTLPolicy(PolicyConfig())
    policy.observe_queueing_delay(2.0)  # T: a call that waits for memory waits 2 s
    router = impl.ProgramRouter(policy, 8, max_programs)
    for iid in INSTANCES:
        router.add_instance(iid)
        assert router.report(iid, 1000, 1000, 0, 0, 0, 1.0)
    return router


#: an instance's report: free, total, queue length, queued tokens, working set, cached fraction
REPORTS = st.tuples(
    st.integers(0, 1000), st.integers(0, 4000), st.integers(0, 50),
    st.integers(0, 1 << 20), st.integers(0, 2000), st.floats(0.0, 1.0),
).map(lambda r: (min(r[0], r[1]), *r[1:]))  # fmt: skip


@given(others=st.lists(REPORTS, min_size=3, max_size=3), need=st.integers(0, 200),
       prefix=st.integers(0, 1 << 17), pin_blocks=st.integers(0, 200))  # fmt: skip
def test_a_live_pin_with_no_wait_keeps_its_call(impl, others, need, prefix, pin_blocks):
    r = build(impl)
    home = r.route("P", 0.0, 10, prefix)
    assert r.pinned(home, "P", 100.0, pin_blocks)
    # the home: empty queue, room for the call beside the pin; the others anything at all
    assert r.report(home, 1000, 1000, 0, 0, 0, 0.0)
    for iid, rep in zip([i for i in INSTANCES if i != home], others, strict=True):
        r.report(iid, *rep)
    assert r.route("P", 1.0, need, prefix) == home


def test_a_call_leaves_its_pin_when_the_wait_costs_more_than_a_miss(impl):
    r = build(impl)
    home = r.route("P", 0.0, 10, 64)
    r.pinned(home, "P", 100.0, 10)
    miss_s = r.policy.miss_cost_s(64)
    # a queue at the home whose prefill alone costs more than rebuilding the context
    queued = 100_000
    wait_s = 8 * r.policy.miss_cost_s(queued // 8)
    assert wait_s > miss_s
    r.report(home, 1000, 1000, 8, queued, 0, 1.0)
    moved = r.route("P", 1.0, 10, 64)
    assert moved != home
    # the same wait, a context costlier to rebuild than that wait: it stays
    r2 = build(impl)
    home2 = r2.route("Q", 0.0, 10, 1 << 20)
    r2.pinned(home2, "Q", 100.0, 10)
    r2.report(home2, 1000, 1000, 8, queued, 0, 1.0)
    assert r2.policy.miss_cost_s(1 << 20) > wait_s
    assert r2.route("Q", 1.0, 10, 1 << 20) == home2


@pytest.mark.parametrize(("now", "stays"), [(4.0, True), (6.0, False)])
def test_an_expired_pin_keeps_nothing(impl, now, stays):
    r = build(impl)
    home = r.route("P", 0.0, 10, 64)
    r.pinned(home, "P", 5.0, 10)
    # the home holds the pin's 10 blocks but has 5 free, and finds no context cached: with
    # the pin live the call needs nothing more; past the deadline it waits for memory (T)
    # and rebuilds its context there too, where elsewhere it only rebuilds it
    r.report(home, 5, 1000, 0, 0, 0, 0.0)
    assert (r.route("P", now, 10, 64) == home) is stays


@given(reports=st.lists(REPORTS, min_size=4, max_size=4), need=st.integers(0, 500))
def test_a_new_program_goes_where_it_fits_when_an_idle_instance_has_room(impl, reports, need):
    r = build(impl)
    for iid, rep in zip(INSTANCES, reports, strict=True):
        r.report(iid, *rep)

    def fits(rep):
        free, total, _q, _t, ws, _c = rep
        return need <= free and ws + need <= total

    idle_fits = [rep for rep in reports if fits(rep) and rep[2] == 0]
    chosen = reports[INSTANCES.index(r.route("N", 0.0, need, 1000))]
    if idle_fits:
        assert fits(chosen) and chosen[2] == 0


@given(routes=st.lists(st.tuples(st.sampled_from("ABCDEFG"), st.integers(0, 50)), max_size=30),
       dead=st.sampled_from(INSTANCES))  # fmt: skip
def test_a_drained_instance_releases_its_programs_and_gets_no_call(impl, routes, dead):
    r = build(impl)
    t = 0.0
    for pid, blocks in routes:
        t += 1.0
        r.route(pid, t, blocks, 100)
    homed = [p for p in "ABCDEFG" if r.home(p) == dead]
    assert sorted(r.drain(dead)) == homed
    assert not r.routable(dead)
    assert r.report(dead, 10, 10, 0, 0, 0, 1.0) is False  # a dead replica's report: ignored
    assert r.pinned(dead, "A", 99.0, 1) is False
    for pid in "ABCDEFG":
        t += 1.0
        assert r.route(pid, t, 1, 100) != dead
    r.add_instance(dead)  # it restarts: routed to once it reports
    assert not r.routable(dead)
    assert r.report(dead, 10, 10, 0, 0, 0, 1.0) and r.routable(dead)


def test_programs_are_bounded_least_recent_first(impl):
    r = build(impl, max_programs=3)
    for t, pid in enumerate("ABCD"):
        r.route(pid, float(t), 1, 0)
    assert r.program_count == 3
    assert r.home("A") is None  # forgotten: routes as new, never refused
    assert r.route("A", 9.0, 1, 0) in INSTANCES


def test_instances_are_bounded(impl):
    r = impl.ProgramRouter(impl.TTLPolicy(), 2)
    r.add_instance("a")
    r.add_instance("b")
    with pytest.raises(ValueError, match=r"instance_id must be within max_instances \(2\)"):
        r.add_instance("c")
    with pytest.raises(ValueError, match="instance_id must be new or drained"):
        r.add_instance("a")


@pytest.mark.parametrize(
    ("field", "args", "exc"),
    [
        ("instance_id", ("nope", 1, 1, 0, 0, 0, 0.5), KeyError),
        ("free_blocks", ("i0", -1, 1, 0, 0, 0, 0.5), ValueError),
        ("queue_len", ("i0", 1, 1, -3, 0, 0, 0.5), ValueError),
        ("cached_fraction", ("i0", 1, 1, 0, 0, 0, math.nan), ValueError),
        ("cached_fraction", ("i0", 1, 1, 0, 0, 0, 1.5), ValueError),
        ("free_blocks", ("i0", 5, 1, 0, 0, 0, 0.5), ValueError),
        ("total_blocks", ("i0", 1, 2.0, 0, 0, 0, 0.5), TypeError),
    ],
)
def test_bad_reports_are_refused_by_field_without_change(impl, field, args, exc):
    r = build(impl)
    before = r.route("P", 0.0, 1, 0)
    with pytest.raises(exc, match=field):
        r.report(*args)
    assert r.routable("i0") and r.home("P") == before


def test_bad_routes_are_refused_by_field(impl):
    r = build(impl)
    r.route("P", 5.0, 1, 0)
    for args, field, exc in [
        (("P", math.nan, 1, 0), "now", ValueError),
        (("P", 4.0, 1, 0), "now", ValueError),  # time going backwards
        (("P", 6.0, -1, 0), "blocks_needed", ValueError),
        (("x" * 2000, 6.0, 1, 0), "program_id", ValueError),  # an id over the bound
        ((7, 6.0, 1, 0), "program_id", TypeError),
    ]:
        with pytest.raises(exc, match=field):
            r.route(*args)
    with pytest.raises(KeyError, match="instance_id"):
        r.pinned("nope", "P", 1.0, 1)
    empty = impl.ProgramRouter(impl.TTLPolicy())
    empty.add_instance("a")  # registered, never reported
    with pytest.raises(ValueError, match="routable instances"):
        empty.route("P", 0.0, 1, 0)
