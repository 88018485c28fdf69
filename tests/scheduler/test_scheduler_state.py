"""ProgramScheduler against a plain-Python model, under any interleaving of operations
(hypothesis stateful testing), on both backends.

The model keeps requests, programs and pins in dicts and finds the next request by sorting
the priority tuples; the decision itself is the policy's business, so the model takes
``ttl_s`` from the returned decision and checks what the scheduler did with it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from parity import plain
from ttlpolicy import PolicyConfig

TOTAL, BUDGET = 200, 60
PROGRAMS = [f"P{i}" for i in range(6)]
TOOLS = [None, "bash", "grep", "web"]


class SchedulerModel(RuleBasedStateMachine):
    impl: Any = None  # set per backend

    def __init__(self) -> None:
        super().__init__()
        policy = self.impl.TTLPolicy(PolicyConfig(min_tool_samples=2, min_total_samples=4))
        self.s = self.impl.ProgramScheduler(policy, TOTAL, BUDGET)
        self.now = 0.0
        assert self.s.expire(self.now) == []
        self.seen = self.now  # the latest time the scheduler was told
        self.next_id = 0
        # rid -> [pid, arrival_s, preempted, pinned, running]
        self.requests: dict[str, list] = {}
        # pid -> [arrival_s, turns, order]: order counts the programs created before it
        self.programs: dict[str, list] = {}
        self.programs_created = 0
        self.pins: dict[str, tuple[int, float]] = {}  # pid -> (blocks, deadline_s)

    # -- model helpers --------------------------------------------------------------------
    def key(self, rid: str) -> tuple:
        pid, arrival, preempted, pinned, _ = self.requests[rid]
        program_arrival, _, order = self.programs[pid]
        return (not preempted, not pinned, program_arrival, order, arrival, rid)

    def waiting(self) -> list[str]:
        return sorted((r for r, v in self.requests.items() if not v[4]), key=self.key)

    def running(self) -> list[str]:
        return sorted(r for r, v in self.requests.items() if v[4])

    def end(self, pid: str, ended) -> None:
        live = sorted(r for r, v in self.requests.items() if v[0] == pid)
        pin = self.pins.pop(pid, None)
        assert ended.program_id == pid
        assert ended.turns == self.programs.pop(pid)[1]
        assert tuple(ended.request_ids) == tuple(live)
        assert (ended.pin is None) == (pin is None)
        if pin is not None:
            assert (ended.pin.blocks, ended.pin.deadline_s) == pin
        for r in live:
            del self.requests[r]

    # -- rules ----------------------------------------------------------------------------
    @rule(dt=st.sampled_from([0.0, 0.5, 3.0, 40.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    def _told(self) -> None:
        self.seen = self.now

    @rule(pid=st.sampled_from(PROGRAMS), blocks=st.integers(0, TOTAL))
    def arrive(self, pid: str, blocks: int) -> None:
        rid = f"r{self.next_id}"
        self.next_id += 1
        consumed = self.s.arrive(rid, pid, self.now, blocks)
        self._told()
        pin = self.pins.pop(pid, None)
        assert plain(consumed) == (None if pin is None else ("Pin", pid, *pin))
        if pid not in self.programs:
            self.programs[pid] = [self.now, 0, self.programs_created]
            self.programs_created += 1
        self.requests[rid] = [pid, self.now, False, pin is not None, False]

    @rule(n=st.integers(1, 3))
    def pop(self, n: int) -> None:
        if n == 0:
            return
        expected = self.waiting()[:n]
        got = self.s.pop_many(n, self.now) if n > 1 else [self.s.pop(self.now)]
        self._told()
        assert got == (expected if expected else ([] if n > 1 else [None]))
        for r in expected:
            self.requests[r][4] = True

    @precondition(lambda self: any(not v[4] for v in self.requests.values()))
    @rule(data=st.data())
    def take(self, data) -> None:
        # a request out of turn runs; the others keep their order (the next pop checks it)
        rid = data.draw(st.sampled_from(self.waiting()))
        assert self.s.take(rid, self.now) is None
        self._told()
        self.requests[rid][4] = True
        assert self.s.state(rid) == "running"
        with pytest.raises(ValueError, match="must be waiting"):
            self.s.take(rid, self.now)

    @precondition(lambda self: any(v[4] for v in self.requests.values()))
    @rule(data=st.data())
    def preempt(self, data) -> None:
        rid = data.draw(st.sampled_from(self.running()))
        self.s.preempt(rid, self.now)
        self._told()
        self.requests[rid][2] = True
        self.requests[rid][4] = False

    @precondition(lambda self: any(v[4] for v in self.requests.values()))
    @rule(
        data=st.data(),
        blocks=st.one_of(st.integers(0, 25), st.integers(0, TOTAL)),
        tool=st.sampled_from(TOOLS),
        last=st.booleans(),
        miss=st.sampled_from([0.0, 5.0, 100.0, 1000.0]),
    )
    def finish(self, data, blocks: int, tool, last: bool, miss: float) -> None:
        self._finish(data.draw(st.sampled_from(self.running())), blocks, tool, last, miss)

    @rule(
        turns=st.lists(
            st.tuples(st.sampled_from(PROGRAMS), st.integers(0, 25), st.sampled_from(TOOLS)),
            min_size=1,
            max_size=4,
        ),
        miss=st.sampled_from([5.0, 100.0, 1000.0]),
    )
    def whole_turns(self, turns: list, miss: float) -> None:
        """Requests arrive, everything waiting runs, the new requests finish: pins build
        up fast, and a program named twice finishes in parallel (its pins merge)."""
        first = self.next_id
        for pid, blocks, _ in turns:
            self.arrive(pid, blocks)
        self.pop(len(self.waiting()))
        for i, (_, blocks, tool) in enumerate(turns):
            self._finish(f"r{first + i}", blocks, tool, False, miss)

    def _finish(self, rid: str, blocks: int, tool, last: bool, miss: float) -> None:
        pid = self.requests[rid][0]
        fin = self.s.finish(
            rid, self.now, blocks, tool=tool, last_turn=last, cache_miss_cost_s=miss
        )
        self._told()
        del self.requests[rid]
        self.programs[pid][1] += 1
        if last:
            assert fin.decision is None and fin.pin is None
            self.end(pid, fin.ended)
            return
        assert fin.ended is None
        ttl = fin.decision.ttl_s
        assert 0.0 <= ttl < math.inf
        fits = sum(b for b, _ in self.pins.values()) + blocks <= BUDGET
        assert fin.pinned == (ttl > 0.0 and fits)
        if ttl > 0.0 and not fits:
            event("budget full")
        if fin.pinned and pid in self.pins:
            event("pin merged")
        if fin.pinned:
            old_blocks, old_deadline = self.pins.get(pid, (0, -math.inf))
            self.pins[pid] = (old_blocks + blocks, max(old_deadline, self.now + ttl))
            assert plain(fin.pin) == ("Pin", pid, *self.pins[pid])
            event("pinned")

    @rule()
    def expire(self) -> None:
        due = sorted((d, pid) for pid, (_, d) in self.pins.items() if d <= self.now)
        got = self.s.expire(self.now)
        self._told()
        assert [(p.deadline_s, p.program_id) for p in got] == due
        for _, pid in due:
            del self.pins[pid]

    @rule(need=st.integers(0, BUDGET + 10))
    def reclaim(self, need: int) -> None:
        pinned_before = sum(b for b, _ in self.pins.values())
        got = self.s.reclaim(need, self.now)
        self._told()
        # latest FCFS position (arrival, then the order the programs were first seen) first
        order = sorted(self.pins, key=lambda pid: self.programs[pid][::2], reverse=True)
        assert [p.program_id for p in got] == order[: len(got)]
        released = sum(p.blocks for p in got)
        # progress: enough is freed whenever the pins hold enough
        assert released >= min(need, pinned_before)
        # and no more pins than needed: all but the last were not enough
        assert sum(p.blocks for p in got[:-1]) < need or not got
        for p in got:
            del self.pins[p.program_id]
        event(f"reclaimed {min(len(got), 2)} pins")

    @precondition(lambda self: bool(self.programs))
    @rule(data=st.data())
    def end_program(self, data) -> None:
        pid = data.draw(st.sampled_from(sorted(self.programs)))
        self.end(pid, self.s.end_program(pid))

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data())
    def abort(self, data) -> None:
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        pid = self.requests[rid][0]
        self.end(pid, self.s.abort(rid))

    @rule()
    def time_going_back_changes_nothing(self) -> None:
        before = (self.s.waiting_count, self.s.pinned_blocks, self.s.peek())
        for call in (
            lambda: self.s.arrive("late", "P0", self.seen - 1.0, 1),
            lambda: self.s.expire(self.seen - 1.0),
            lambda: self.s.pop(self.seen - 1.0),
        ):
            try:
                call()
            except ValueError:
                pass
            else:
                raise AssertionError("time going back was accepted")
        assert (self.s.waiting_count, self.s.pinned_blocks, self.s.peek()) == before

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def budget_and_deadlines(self) -> None:
        assert self.s.pinned_blocks == sum(b for b, _ in self.pins.values()) <= BUDGET
        pins = self.s.pins()
        assert all(math.isfinite(p.deadline_s) for p in pins)
        assert sorted((p.program_id, p.blocks, p.deadline_s) for p in pins) == sorted(
            (pid, b, d) for pid, (b, d) in self.pins.items()
        )
        expect_next = min((d for _, d in self.pins.values()), default=None)
        assert self.s.next_deadline_s == expect_next

    @invariant()
    def queue_order_and_counts(self) -> None:
        waiting = self.waiting()
        assert self.s.waiting_count == len(waiting)
        assert self.s.running_count == len(self.running())
        assert self.s.program_count == len(self.programs)
        assert self.s.peek() == (waiting[0] if waiting else None)
        for rid in waiting[:3]:
            assert self.s.priority(rid) == self.key(rid)

    def teardown(self) -> None:
        # No leak: once every program ends, nothing is left.
        for pid in sorted(self.programs):
            self.end(pid, self.s.end_program(pid))
        s = self.s
        assert (s.program_count, s.waiting_count, s.running_count, s.pin_count) == (0, 0, 0, 0)
        assert s.pinned_blocks == 0 and s.next_deadline_s is None and s.peek() is None


def test_scheduler_state_machine(impl):
    machine = type(f"SchedulerModel_{impl.name}", (SchedulerModel,), {"impl": impl})
    run_state_machine_as_test(
        machine,
        settings=settings(stateful_step_count=40, suppress_health_check=[HealthCheck.too_slow]),
    )
