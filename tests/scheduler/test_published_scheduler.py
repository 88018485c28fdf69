"""ProgramScheduler under the published pin rules (``PolicyConfig.published()``, i.e.
``pin_handover="schedule"``), both backends: a pin passes to the program's next request when
that request is scheduled, holds (past its deadline) while the request waits, ranks the
program's requests as pinned only while it is held, and a pin released under memory pressure
makes the request a returning one for T."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig

MISS_S = 20.0  # cold start: τ = ln(20) ≈ 3.0 s


def scheduler(impl, total=1000):
    policy = impl.TTLPolicy(PolicyConfig.published())
    return impl.ProgramScheduler(policy, total, total), policy


def pinned_program(s, pid="A", now=0.0, blocks=10):
    """``pid``'s first request runs and finishes with a tool call: pinned for ln(MISS_S)."""
    s.arrive(f"{pid}0", pid, now, blocks)
    assert s.pop(now) == f"{pid}0"
    done = s.finish(f"{pid}0", now, blocks, tool="bash", cache_miss_cost_s=MISS_S)
    assert done.pinned and done.decision.ttl_s == pytest.approx(math.log(MISS_S))
    return done.pin


def earlier_program(s, pid="B"):
    """Program ``pid`` arrives at 0 (earlier than the others) and runs one turn unpinned."""
    s.arrive(f"{pid}0", pid, 0.0, 5)
    assert s.pop(0.0) == f"{pid}0"
    assert not s.finish(f"{pid}0", 0.0, 5, tool="ls", cache_miss_cost_s=0.0).pinned


def test_the_handover_mode_comes_from_the_config(impl) -> None:
    s, _ = scheduler(impl)
    assert s.pin_handover == "schedule"
    assert impl.ProgramScheduler(impl.TTLPolicy(), 10, 5).pin_handover == "arrival"


def test_pin_is_handed_over_when_the_next_request_is_scheduled(impl) -> None:
    s, _ = scheduler(impl)
    earlier_program(s, "B")
    pin = pinned_program(s, "A", now=0.5)
    s.arrive("B1", "B", 0.5, 5)  # waits
    assert s.arrive("A1", "A", 1.0, 12) is None  # arrival does not consume the pin
    assert s.pin("A") == pin and s.pinned_blocks == 10
    assert s.priority("A1")[:2] == (True, False)  # ranks as pinned ...
    assert s.peek() == "A1"  # ... ahead of the earlier program B
    assert s.pop(1.0) == "A1"
    assert s.pin("A") is None and s.pinned_blocks == 0
    assert s.pop(1.0) == "B1"


def test_pin_holds_past_its_deadline_while_a_request_waits(impl) -> None:
    s, _ = scheduler(impl)
    pin = pinned_program(s, "A")
    s.arrive("A1", "A", 1.0, 10)
    late = pin.deadline_s + 100.0
    assert s.expire(late) == []
    assert s.pin("A") == pin
    assert s.pop(late) == "A1" and s.pin("A") is None


def test_expiry_needs_now_past_the_deadline(impl) -> None:
    s, _ = scheduler(impl)
    pin = pinned_program(s, "A")
    assert s.expire(pin.deadline_s) == []  # now == deadline: still held
    assert s.expire(pin.deadline_s + 1e-9) == [pin]
    assert s.pin_count == 0


def test_reclaim_drops_pinned_priority_and_counts_the_wait_for_t(impl) -> None:
    s, policy = scheduler(impl)
    earlier_program(s, "B")
    pinned_program(s, "A", now=0.5)
    s.arrive("B1", "B", 0.5, 5)  # waits
    s.arrive("A1", "A", 1.0, 10)
    assert s.peek() == "A1"
    assert [p.program_id for p in s.reclaim(1, 2.0)] == ["A"]
    assert s.priority("A1")[:2] == (True, True)
    assert s.peek() == "B1"  # program-level FCFS again
    assert s.pop(3.0) == "B1"
    assert policy.out_of_order_cost_s == 2.5  # B1 found no pin: waited 0.5 → 3
    assert s.pop(4.0) == "A1"
    assert policy.out_of_order_cost_s == 2.75  # A1 waited 1 → 4: the mean of 2.5 and 3


def test_handed_over_request_is_not_a_returning_one(impl) -> None:
    s, policy = scheduler(impl)
    pinned_program(s, "A")
    s.arrive("A1", "A", 1.0, 10)
    assert s.pop(2.0) == "A1"
    assert policy.out_of_order_cost_s == 0.0


def test_parallel_requests_rank_pinned_only_while_the_pin_is_held(impl) -> None:
    s, _ = scheduler(impl)
    pinned_program(s, "A")
    s.arrive("A1", "A", 1.0, 10)
    s.arrive("A2", "A", 1.0, 10)
    assert s.pop(1.0) == "A1"  # takes the pin
    assert s.priority("A2")[:2] == (True, True)
    # A1 finishes pinned again while A2 waits: A2 ranks as pinned, and takes it when popped.
    done = s.finish("A1", 2.0, 10, tool="bash", cache_miss_cost_s=MISS_S)
    assert done.pinned and s.priority("A2")[:2] == (True, False)
    assert s.pop(2.0) == "A2" and s.pin("A") is None


def test_last_step_ends_the_pin(impl) -> None:
    s, _ = scheduler(impl)
    pinned_program(s, "A")
    s.arrive("A1", "A", 1.0, 10)
    s.pop(1.0)
    done = s.finish("A1", 1.5, 10, last_turn=True)
    assert done.ended is not None and s.pin_count == 0 and s.program_count == 0


def test_no_pin_budget_means_every_positive_ttl_pins(impl) -> None:
    s, _ = scheduler(impl, total=100)
    for i, pid in enumerate("ABCDEFGHIJ"):
        pinned_program(s, pid, now=float(i) * 0.01, blocks=10)
    assert s.pinned_blocks == 100 and s.pin_count == 10
    # Latest program arrival first under pressure.
    assert [p.program_id for p in s.reclaim(15, 0.2)] == ["J", "I"]


def test_next_deadline_skips_pins_held_for_a_waiting_request(impl) -> None:
    s, _ = scheduler(impl)
    a = pinned_program(s, "A", now=0.0)
    b = pinned_program(s, "B", now=1.0)
    assert s.next_deadline_s == a.deadline_s
    s.arrive("A1", "A", 1.0, 10)  # A's pin cannot expire now: B's deadline is the next
    assert s.next_deadline_s == b.deadline_s
    assert s.expire(b.deadline_s + 1.0) == [b]
    assert s.next_deadline_s is None and s.pin("A") == a


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["arrive", "pop", "finish", "expire", "reclaim", "tick"]),
            st.sampled_from("ABC"),
            st.integers(1, 40),
        ),
        max_size=60,
    )
)
def test_published_pins_never_leak_and_expire_only_when_no_request_waits(impl, ops) -> None:
    s, _ = scheduler(impl, total=100)
    now, n = 0.0, 0
    waiting: dict[str, str] = {}  # rid -> program
    running: dict[str, str] = {}
    for op, pid, x in ops:
        if op == "tick":
            now += x / 10.0
        elif op == "arrive" and pid not in waiting.values() and pid not in running.values():
            n += 1
            s.arrive(f"r{n}", pid, now, x)
            waiting[f"r{n}"] = pid
        elif op == "pop" and waiting:
            rid = s.pop(now)
            assert s.pin(waiting[rid]) is None  # handed over to the popped request
            running[rid] = waiting.pop(rid)
        elif op == "finish" and running:
            rid = sorted(running)[0]
            s.finish(rid, now, x, tool="ls", cache_miss_cost_s=float(x))
            running.pop(rid)
        elif op == "expire":
            for pin in s.expire(now):
                assert pin.deadline_s < now and pin.program_id not in waiting.values()
            for pin in s.pins():
                assert pin.deadline_s >= now or pin.program_id in waiting.values()
        elif op == "reclaim":
            s.reclaim(x, now)
        pins = s.pins()
        assert s.pinned_blocks == sum(p.blocks for p in pins) <= 100
        assert s.waiting_count == len(waiting)
        for rid, p in waiting.items():  # pinned rank exactly while the program holds a pin
            assert s.priority(rid)[1] == (s.pin(p) is None)


def test_a_preempted_request_holds_its_programs_pin(impl) -> None:
    """Parallel requests: A1 finishes pinned while A2 runs; A2 preempted waits again, so A's
    pin can no longer expire (and the next deadline is not A's)."""
    s, _ = scheduler(impl)
    s.arrive("A1", "A", 0.0, 10)
    s.arrive("A2", "A", 0.0, 10)
    assert s.pop_many(2, 0.0) == ["A1", "A2"]
    pin = s.finish("A1", 0.5, 10, tool="bash", cache_miss_cost_s=MISS_S).pin
    assert s.next_deadline_s == pin.deadline_s
    s.preempt("A2", 1.0)
    assert s.next_deadline_s is None
    assert s.expire(pin.deadline_s + 1.0) == [] and s.pin("A") == pin
    assert s.pop(pin.deadline_s + 1.0) == "A2" and s.pin("A") is None
