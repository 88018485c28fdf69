"""ProgramRouter's rules, on both backends: a returning call stays with its live pin when
the wait there is zero, leaves when the wait costs more than a miss elsewhere; at its home it
waits behind the return queue only, anywhere else (a new program there) behind the whole
queue, and it fits on memory alone (load control admitted it); a program whose home evicted
its context routes as new; a new program goes where it fits beside the working set; a
drained instance releases its programs and is never routed to; bounded tables; bad input
refused by field, before any change."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key

INSTANCES = ["i0", "i1", "i2", "i3"]


def build(impl: Any, max_programs: int = 64) -> Any:
    policy = impl.TTLPolicy(PolicyConfig())
    policy.observe_queueing_delay(2.0)  # T: a call that waits for memory waits 2 s
    router = impl.ProgramRouter(policy, 8, max_programs)
    for iid in INSTANCES:
        router.add_instance(iid)
        assert router.report(iid, 1000, 1000, 0, 0, 0, 1.0)
    return router


def routed(impl: Any, routes: list[tuple[str, int]]) -> tuple[Any, float]:
    """``build``'s router after ``routes`` ((program, blocks), one a second): it and the time."""
    r = build(impl)
    t = 0.0
    for pid, blocks in routes:
        t += 1.0
        r.route(pid, t, blocks, 100)
    return r, t


#: an instance's report: free, total, queue length, queued tokens, working set, cached fraction
REPORTS = st.tuples(
    st.integers(0, 1000), st.integers(0, 4000), st.integers(0, 50),
    st.integers(0, 1 << 20), st.integers(0, 2000), st.floats(0.0, 1.0),
# (consistent reports: free within total, and a queued request holds at least one token —
# a queue of empty requests costs no prefill, so it would tie with an idle instance)
).map(lambda r: (min(r[0], r[1]), r[1], r[2], max(r[3], r[2]), *r[4:]))  # fmt: skip


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


def test_a_return_is_priced_behind_the_return_queue_at_its_home(impl):
    """Program-level FCFS: a returning call runs ahead of the new programs queued at its
    home.  The home's queue is long but holds first calls only; another instance's queue is
    short: the call stays (the old rule, pricing the whole queue, moved it)."""
    r = build(impl)
    home = r.route("P", 0.0, 10, 4096)
    other = next(i for i in INSTANCES if i != home)
    queued = 400_000  # 40 first calls of 10k tokens: far more than rebuilding 4k tokens
    assert 40 * r.policy.miss_cost_s(queued // 40) > r.policy.miss_cost_s(4096) + r.policy.eta * 2.0
    for iid in INSTANCES:
        r.report(iid, 1000, 1000, 1, 1000, 0, 1.0)  # elsewhere: one short call waits
    r.report(home, 1000, 1000, 40, queued, 0, 1.0, 0, 0)
    assert r.route("P", 1.0, 10, 4096) == home
    # the same queue, all of it returns (or not told apart: a FCFS engine): it moves
    for returns in [(40, queued), ()]:
        r2 = build(impl)
        home2 = r2.route("P", 0.0, 10, 4096)
        for iid in INSTANCES:
            r2.report(iid, 1000, 1000, 1, 1000, 0, 1.0)
        r2.report(home2, 1000, 1000, 40, queued, 0, 1.0, *returns)
        assert r2.route("P", 1.0, 10, 4096) != home2
    # a new program waits behind the whole queue, whatever part of it returns
    assert r.route("N", 2.0, 10, 4096) == other or r.home("N") != home


def test_a_return_queue_elsewhere_is_not_the_calls_queue(impl):
    """A program that moves is a new program at its new instance: that instance's empty
    return queue does not make it cheap; nor does a new program take it."""
    r = build(impl)
    home = r.route("P", 0.0, 10, 64)
    r.pinned(home, "P", 100.0, 10)
    r.report(home, 1000, 1000, 2, 2000, 0, 1.0, 2, 2000)  # a short queue of returns
    for iid in INSTANCES:
        if iid != home:  # long queues of first calls, no return queued
            r.report(iid, 1000, 1000, 50, 500_000, 0, 1.0, 0, 0)
    assert r.route("P", 1.0, 10, 64) == home
    assert r.route("N", 2.0, 10, 64) == home


def test_a_routed_return_joins_its_homes_return_queue(impl):
    """Until the home reports again, the router counts a return it sent there in the
    return queue: the next return there is priced behind it."""
    r = build(impl)
    home = "i2"
    for pid in ("P", "Q"):
        assert r.pinned(home, pid, 0.0, 10)  # both homed there, their pins past
    for iid in INSTANCES:
        r.report(iid, 1000, 1000, 0, 0, 0, 1.0, 0, 0)
    long, short = 1 << 17, 64
    assert r.policy.miss_cost_s(long) > r.policy.miss_cost_s(short) + r.policy.eta * 2.0
    # P returns: nothing ahead, it stays (no live pin: its prefix counts as queued)
    assert r.route("P", 1.0, 10, long) == home
    # Q returns: behind P's prefill at home, more than rebuilding its short context elsewhere
    assert r.route("Q", 2.0, 10, short) != home


def test_at_its_home_an_admitted_program_waits_for_memory_only(impl):
    """Load control never holds back a program it admitted: a home whose working set is
    over its blocks does not make the return wait T when the call fits in free memory (the
    old rule priced that wait and moved it)."""
    r = build(impl)
    home = r.route("P", 0.0, 10, 64)
    loss = r.policy.miss_cost_s(64) + r.policy.eta * r.policy.out_of_order_cost_s
    # the home finds a tenth of returns' prefixes cached: staying costs 0.9 of a rebuild
    # (plus T with the old rule: more than the rebuild elsewhere)
    assert r.policy.out_of_order_cost_s > 0.1 * loss
    r.report(home, 500, 1000, 0, 0, 1500, 0.1)  # working set 1500 of 1000 blocks, 500 free
    assert r.route("P", 1.0, 10, 64) == home
    # not enough free memory: it waits T there, more than rebuilding elsewhere
    r.report(home, 5, 1000, 0, 0, 1500, 0.1)
    assert r.route("P", 2.0, 10, 64) != home


def test_an_evicted_context_frees_its_program_from_its_home(impl):
    """Its home evicted its context: it routes as new — here where the whole queue is
    shortest, where as a return it stayed (its home's return queue empty)."""
    r = build(impl)
    home = r.route("P", 0.0, 10, 4096)
    for iid in INSTANCES:
        r.report(iid, 1000, 1000, 1, 1000, 0, 1.0, 0, 0)
    r.report(home, 1000, 1000, 40, 400_000, 0, 1.0, 0, 0)
    elsewhere = next(i for i in INSTANCES if i != home)
    assert not r.evicted(elsewhere, "P")  # not its home: ignored
    assert not r.evicted(home, "nobody")
    assert r.home("P") == home
    assert r.evicted(home, "P") and r.home("P") is None
    assert r.route("P", 1.0, 10, 4096) != home
    # a drained instance's evictions are ignored; bad ids refused by field
    home_q = r.route("Q", 2.0, 10, 64)
    r.drain(home_q)
    assert not r.evicted(home_q, "Q")
    with pytest.raises(KeyError, match="instance_id"):
        r.evicted("nope", "P")
    with pytest.raises(ValueError, match="program_id"):
        r.evicted(home, "")
    with pytest.raises(TypeError, match="instance_id"):
        r.evicted(3, "P")
    with pytest.raises(ValueError, match="held_blocks"):
        r.evicted(home, "P", -1)


@pytest.mark.parametrize(("held", "freed"), [(0, True), (50, True), (51, False), (100, False)])
def test_a_home_holding_most_of_a_context_keeps_its_program(impl, held, freed):
    """Its last call needed 100 blocks: a home that still holds more than half of them keeps
    the program (it routes as a return); at most half, it routes as new."""
    r = build(impl)
    home = r.route("P", 0.0, 100, 6400)
    assert r.evicted(home, "P", held) is freed
    assert (r.home("P") is None) is freed


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
    r, t = routed(impl, routes)
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


def test_a_tenant_flooding_new_programs_forgets_only_its_own(impl):
    """3 programs in all: tenant b's program, the least recent, keeps its home while tenant
    a routes 20 new ones (a holds more than b once the table is full); a's first are gone."""
    a, b = tenant_key("a"), tenant_key("b")
    r = build(impl, max_programs=3)
    r.route(program_key(b, "p"), 0.0, 1, 0)
    for t in range(20):
        r.route(program_key(a, f"p{t}"), 1.0 + t, 1, 0)
    assert r.program_count == 3 and r.home(program_key(b, "p")) in INSTANCES
    assert [r.home(program_key(a, f"p{t}")) is None for t in (0, 18, 19)] == [True, False, False]


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
        ("return_queue_len", ("i0", 1, 1, 2, 10, 0, 0.5, -1, 0), ValueError),
        ("return_queue_len", ("i0", 1, 1, 2, 10, 0, 0.5, 3, 0), ValueError),  # > queue_len
        ("return_queued_tokens", ("i0", 1, 1, 2, 10, 0, 0.5, 1, 11), ValueError),
        ("return_queued_tokens", ("i0", 1, 1, 2, 10, 0, 0.5, 1, None), ValueError),
        ("return_queue_len", ("i0", 1, 1, 2, 10, 0, 0.5, None, 5), ValueError),
        ("return_queue_len", ("i0", 1, 1, 2, 10, 0, 0.5, 1.0, 5), TypeError),
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


# -- hostile input: non-finite costs, instances that come and go, pins as claims ------------


@pytest.mark.parametrize("home", INSTANCES)
def test_a_nan_cost_never_wins_by_scan_order(impl, home):
    """A config the library accepts makes a miss cost inf (``prefill_s_per_token2=1e300``): at
    a home finding every prefix cached, ``(1 − 1) · inf`` is NaN, and a NaN compared with
    anything is false, so the first instance scanned won, home or not.  NaN counts as inf:
    every cost is inf here, and the tie goes home."""
    policy = impl.TTLPolicy(PolicyConfig(prefill_s_per_token2=1e300))
    r = impl.ProgramRouter(policy, 8, 64)
    for iid in INSTANCES:
        r.add_instance(iid)
        r.report(iid, 1000, 1000, 0, 0, 0, 1.0)
    assert math.isinf(policy.miss_cost_s(1 << 20))
    assert r.pinned(home, "P", -1.0, 10)  # homed there, its pin past
    assert r.route("P", 0.0, 10, 1 << 20) == home
    # a new program: every cost finite (no queue), the most room wins, not the scan order
    r.report("i3", 1000, 2000, 0, 0, 0, 1.0)
    assert r.route("N", 1.0, 10, 1 << 20) == "i3"


@given(routes=st.lists(st.tuples(st.sampled_from("ABCDEFG"), st.integers(0, 50)), max_size=30),
       gone=st.sampled_from(INSTANCES))  # fmt: skip
def test_a_removed_instance_releases_its_programs_and_frees_its_slot(impl, routes, gone):
    r, _ = routed(impl, routes)
    homes = {p: r.home(p) for p in "ABCDEFG"}
    assert sorted(r.remove_instance(gone)) == [p for p in "ABCDEFG" if homes[p] == gone]
    assert r.instance_ids == [i for i in INSTANCES if i != gone]
    # the others keep their programs (homes held by index must follow the shift)
    assert {p: r.home(p) for p in "ABCDEFG"} == {
        p: (None if h == gone else h) for p, h in homes.items()
    }
    with pytest.raises(KeyError, match="instance_id"):
        r.report(gone, 10, 10, 0, 0, 0, 1.0)
    r.add_instance(gone)  # a new instance, registered last
    assert r.instance_ids[-1] == gone and not r.routable(gone)


def test_instances_that_come_and_go_stay_within_the_bound(impl):
    r = impl.ProgramRouter(impl.TTLPolicy(), 2)
    r.add_instance("live")
    r.report("live", 10, 10, 0, 0, 0, 1.0)
    for k in range(50):
        r.add_instance(f"r{k}")
        r.report(f"r{k}", 10, 10, 0, 0, 0, 1.0)
        assert r.pinned(f"r{k}", "P", 100.0, 1)
        assert r.remove_instance(f"r{k}") == ["P"]
    assert r.instance_ids == ["live"] and r.route("P", 0.0, 1, 0) == "live"
    with pytest.raises(KeyError, match="instance_id"):
        r.remove_instance("r0")


def test_a_pin_elsewhere_cannot_take_a_program_the_router_homes(impl):
    r = build(impl)
    home = r.route("P", 0.0, 10, 64)
    other = next(i for i in INSTANCES if i != home)
    assert r.pinned(other, "P", 100.0, 10) is False
    assert r.home("P") == home
    # its home's own pin is accepted, and keeps the call there past a busier home
    assert r.pinned(home, "P", 100.0, 10) is True
    r.report(home, 1000, 1000, 1, 100, 0, 0.0)
    assert r.route("P", 1.0, 10, 64) == home
    # an unknown program's pin is adopted (another router may have sent it there)
    assert r.pinned(other, "Q", 100.0, 10) is True and r.home("Q") == other


@given(claims=st.lists(st.tuples(st.sampled_from(INSTANCES), st.sampled_from("PQ")), max_size=20))
def test_pins_never_move_a_routed_program(impl, claims):
    r = build(impl)
    homes = {p: r.route(p, 0.0, 10, 64) for p in "PQ"}
    for iid, pid in claims:
        assert r.pinned(iid, pid, 50.0, 5) is (iid == homes[pid])
    assert {p: r.home(p) for p in "PQ"} == homes


@pytest.mark.parametrize(("deadline", "now", "accepted"), [
    (5.0, None, False), (5.5, None, True),  # the router's clock: its last route, at 5
    (7.0, 7.0, False), (7.5, 7.0, True),  # the caller's
])  # fmt: skip
def test_an_expired_pin_sets_no_home(impl, deadline, now, accepted):
    r = build(impl)
    r.route("X", 5.0, 1, 0)
    assert r.pinned("i1", "P", deadline, 10, now) is accepted
    assert (r.home("P") == "i1") is accepted


def test_a_claim_never_forgets_a_program(impl):
    r = build(impl, max_programs=2)
    r.route("A", 0.0, 1, 0)
    r.route("B", 1.0, 1, 0)
    assert r.pinned("i0", "invented", 100.0, 1) is False
    assert r.program_count == 2 and r.home("A") is not None and r.home("invented") is None


def test_bad_pins_are_refused_by_field_without_change(impl):
    r = build(impl)
    for args, field, exc in [
        (("i0", "P", 9.0, 1, math.nan), "now", ValueError),
        (("i0", "P", 9.0, 1, "soon"), "now", TypeError),
        (("i0", "P", math.inf, 1), "deadline_s", ValueError),
        (("i0", "P", 9.0, -1), "blocks", ValueError),
    ]:
        with pytest.raises(exc, match=field):
            r.pinned(*args)
    assert r.home("P") is None and r.program_count == 0
