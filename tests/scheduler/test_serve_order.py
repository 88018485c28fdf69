"""``serve_order="attained"`` (both backends): returning calls rank by their arrival plus the
engine seconds their program has run (least attained service, a waited second worth a served
second); first calls after every returning call, in program order; preempted and pinned calls
ahead as always.  The rule is stated in the reference's module doc; these tests state its
consequences on hand-made schedules and, with hypothesis, on random ones against the test's
own bookkeeping of each program's service."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ttlpolicy import PolicyConfig


def scheduler(impl, order="attained", total=1000, pin_budget=0):
    policy = impl.TTLPolicy(PolicyConfig(serve_order=order))
    return impl.ProgramScheduler(policy, total, pin_budget)


def run_turn(s, rid, pid, start, end, blocks=5):
    """``rid`` of ``pid`` arrives and runs alone from ``start`` to ``end`` (a tool call next)."""
    s.arrive(rid, pid, start, blocks)
    assert s.pop(start) == rid
    s.finish(rid, end, blocks, tool="bash")


def test_the_order_comes_from_the_config(impl) -> None:
    assert impl.ProgramScheduler(impl.TTLPolicy(), 10, 5).serve_order == "program"
    assert scheduler(impl).serve_order == "attained"
    with pytest.raises(ValidationError, match="serve_order"):
        PolicyConfig(serve_order="las")


@pytest.mark.parametrize("order, first", [("attained", "B1"), ("program", "A1")])
def test_the_least_served_program_returns_first(impl, order, first) -> None:
    s = scheduler(impl, order)
    run_turn(s, "A0", "A", 0.0, 10.0)  # A arrived first and has run 10 s
    run_turn(s, "B0", "B", 10.0, 11.0)  # B has run 1 s
    s.arrive("A1", "A", 20.0, 5)
    s.arrive("B1", "B", 20.0, 5)
    assert s.pop(20.0) == first


def test_waiting_buys_rank_second_for_second(impl) -> None:
    s = scheduler(impl)
    run_turn(s, "A0", "A", 0.0, 5.0)  # A: 5 s of service
    run_turn(s, "B0", "B", 5.0, 5.5)  # B: 0.5 s
    run_turn(s, "C0", "C", 5.5, 5.5)  # C: none
    s.arrive("A1", "A", 100.0, 5)  # rank 105
    s.arrive("B1", "B", 104.0, 5)  # rank 104.5: arrived within A's 5 s, passes it
    s.arrive("C1", "C", 106.0, 5)  # rank 106: arrived after A's rank, does not
    assert [s.pop(106.0) for _ in range(3)] == ["B1", "A1", "C1"]


def test_first_calls_wait_behind_every_returning_call_in_program_order(impl) -> None:
    s = scheduler(impl)
    run_turn(s, "A0", "A", 0.0, 500.0)  # A has run 500 s: rank of its return = 501 + 500
    s.arrive("Y0", "Y", 500.5, 5)  # first calls, Y seen before X
    s.arrive("X0", "X", 500.5, 5)
    s.arrive("A1", "A", 501.0, 5)
    assert [s.pop(502.0) for _ in range(3)] == ["A1", "Y0", "X0"]


def test_a_preemption_counts_the_run_and_resumes_first(impl) -> None:
    s = scheduler(impl)
    run_turn(s, "B0", "B", 0.0, 2.0)  # B: 2 s
    s.arrive("A0", "A", 2.0, 5)
    assert s.pop(2.0) == "A0"
    s.preempt("A0", 10.0)  # A: 8 s so far
    s.arrive("B1", "B", 10.0, 5)
    assert s.pop(10.0) == "A0"  # preempted: ahead of the returning B1
    s.finish("A0", 11.0, 5, tool="bash")  # A: 9 s in all
    s.arrive("A1", "A", 12.0, 5)  # rank 21 against B1's 12
    assert [s.pop(12.0) for _ in range(2)] == ["B1", "A1"]


# -- random schedules: the bound and progress, against the test's own bookkeeping ------------

turns = st.lists(  # a program: (engine seconds, tool seconds after) per turn
    st.tuples(st.sampled_from([0.5, 1.0, 4.0, 30.0]), st.sampled_from([0.0, 1.0, 3.0, 20.0])),
    min_size=1,
    max_size=4,
)


def replay(s, programs, slots: int) -> list[str]:
    """A toy engine with ``slots`` concurrent calls, each running its given seconds, driving
    ``s``; returns the calls in the order popped.  At every pop of a call that is not
    preempted or pinned, no returning call waits whose rank — its arrival plus its program's
    service when queued, tallied here — is below the popped call's arrival (a request queued
    at rank r runs before anything arriving after r), and first calls never pass a waiting
    returning one."""
    served: dict[str, float] = {}  # program -> engine seconds run so far (the test's own tally)
    rank: dict[str, float] = {}  # waiting returning call -> its rank, fixed when it arrived
    arrival: dict[str, float] = {}
    popped_order: list[str] = []
    events: list[tuple[float, int, str, str, int]] = []  # (time, seq, kind, program, turn)
    for i, (offset, _) in enumerate(programs):
        events.append((offset * i, i, "arrive", f"p{i}", 0))
    seq = len(events)
    heapq.heapify(events)
    running: dict[str, float] = {}  # rid -> when it started
    while events:
        t, _, kind, pid, k = heapq.heappop(events)
        rid = f"{pid}.{k}"
        plan = programs[int(pid[1:])][1]
        if kind == "arrive":
            s.arrive(rid, pid, t, 5)
            arrival[rid] = t
            if k > 0:
                rank[rid] = t + served[pid]
        else:  # the call ends
            served[pid] = served.get(pid, 0.0) + (t - running.pop(rid))
            last = k == len(plan) - 1
            s.finish(rid, t, 5, tool="bash", last_turn=last)
            if not last:
                heapq.heappush(events, (t + plan[k][1], seq, "arrive", pid, k + 1))
                seq += 1
        while len(running) < slots and (popped := s.pop(t)) is not None:
            p, turn = popped.rsplit(".", 1)
            waiting_returns = [r for r in rank if r != popped]
            if turn == "0":
                assert not waiting_returns, f"first call {popped} passed {waiting_returns}"
            for r in waiting_returns:
                assert arrival[popped] <= rank[r], f"{popped} passed {r} (rank {rank[r]})"
            rank.pop(popped, None)
            running[popped] = t
            popped_order.append(popped)
            run_s = programs[int(p[1:])][1][int(turn)][0]
            heapq.heappush(events, (t + run_s, seq, "end", p, int(turn)))
            seq += 1
    return popped_order


schedules = st.lists(st.tuples(st.sampled_from([0.0, 1.0, 5.0]), turns), min_size=1, max_size=7)


@given(schedules, st.integers(1, 3))
def test_no_later_arrival_passes_a_returning_call_and_every_program_ends(impl, programs, slots):
    s = scheduler(impl)
    popped = replay(s, programs, slots)
    assert len(popped) == sum(len(plan) for _, plan in programs)  # every call ran, once
    assert s.waiting_count == 0 and s.running_count == 0 and s.program_count == 0


@given(schedules, st.integers(1, 3))
def test_backends_serve_in_the_same_order(backends, programs, slots):
    rust, python = (replay(scheduler(b), programs, slots) for b in backends)
    assert rust == python


def test_an_engine_with_a_reload_tier_serves_by_attained_service_unless_told() -> None:
    assert PolicyConfig.for_engine(None).serve_order == "program"
    assert PolicyConfig.for_engine(None, reload_tier=True).serve_order == "attained"
    told = PolicyConfig.for_engine('{"serve_order": "program"}', reload_tier=True)
    assert told.serve_order == "program"
    with pytest.raises(ValidationError, match="serve_order"):
        PolicyConfig.for_engine('{"serve_order": "fastest"}')
