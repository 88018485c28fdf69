"""ProgramLifecycle under any interleaving of two tenants' calls (hypothesis stateful
testing; tenants are the disjoint id namespaces ``a:`` and ``b:``), bad arguments mixed in
(negative or too many blocks, time going backwards, unknown ids, wrong types, load control's
clock moved ahead by ``may_run``, its memory smaller than the scheduler's) and ``release``
answers that raise or are refused.  On each backend, after every call:

* all-or-nothing: a refused call leaves every observable piece of state as it was — the
  scheduler's (pins, the waiting queue and each request's place, counters), load control's
  (programs known, admitted, live), the lifecycle's held chains and the policy's samples;
* a ``give_way`` whose ``release`` failed leaves the state its contract states: every pin
  ``reclaim`` took released once and gone, no held chain yielded after a pin's release
  failed, the yielded chains gone and the others held, the rest unchanged;
* pins never leak (none of an ended program), the pinned blocks stay within the budget,
  every held chain is a live request's, and a program with a live request is live in load
  control too (the two parts never drift apart);

and the Rust and Python backends give the same answers and errors (type and message) and the
same state for the same sequence."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from conftest import NATIVE, REFERENCE
from parity import PINNING_MISS_COST_S, close, outcome, plain, scheduler_snapshot
from ttlpolicy import PolicyConfig

TENANTS = ("a", "b")
PROGRAMS = [f"{t}:{i}" for t in TENANTS for i in range(3)]
TOOLS = [None, "bash", "grep"]
#: The scheduler's memory and pin budget; load control's memory is smaller, so it alone
#: refuses some sizes.
TOTAL, BUDGET, ADMISSION_TOTAL = 100, 50, 60
#: Small caps on idle programs: forgetting them is exercised too.
MAX_IDLE, ADMISSION_MAX_IDLE = 3, 2
#: Pins last at most this long, and programs idle longer queue as new arrivals.
MAX_TTL_S = 30.0
#: A time past any the machine reaches: views that take `now` read at it move no clock.
FAR_S = 1e9


class EngineError(ValueError):
    """What a failing ``release`` raises (told apart from the library's errors by type)."""


#: A release's scripted answers: block counts (a shared chain frees nothing: 0), an
#: exception, and answers the lifecycle refuses (negative, a bool, a float, beyond i64).
ANSWERS = st.lists(
    st.one_of(*[st.integers(0, 30)] * 4, st.sampled_from(["raise", -1, True, 2.5, 2**70])),
    max_size=6,
)


def is_refused(answer: Any) -> bool:
    """Whether ``give_way`` fails on this answer of ``release``."""
    if answer == "raise" or isinstance(answer, bool) or not isinstance(answer, int):
        return True
    return not 0 <= answer <= 1 << 40


class Release:
    """The engine's side of ``give_way``: answers from a script, each call recorded with its
    answer."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str | None, Any]] = []

    def __call__(self, program_id: str, request_id: str | None) -> Any:
        answer = self.answers.pop(0) if self.answers else 10
        self.calls.append((program_id, request_id, answer))
        if answer == "raise":
            raise EngineError(f"the engine could not free {program_id}/{request_id}")
        return answer


def admit_request(life: Any, rid: str) -> Any:
    return life.admitted(rid)


def build(impl: Any) -> Any:
    # The cold-start prior decides TTLs (pins are common) and load control is on.
    policy = impl.TTLPolicy(
        PolicyConfig(
            min_tool_samples=1000,
            min_total_samples=1000,
            prior_mean_from_history=False,
            max_ttl_s=MAX_TTL_S,
            admission=True,
        )
    )
    scheduler = impl.ProgramScheduler(policy, TOTAL, BUDGET, MAX_IDLE)
    admission = impl.AdmissionControl(policy, ADMISSION_TOTAL, ADMISSION_MAX_IDLE)
    return impl.ProgramLifecycle(scheduler, admission)


def scheduler_part(life: Any, rids: list[str]) -> Any:
    s = life.scheduler
    return plain((
        scheduler_snapshot(s),
        [(outcome(partial(s.state, r)), outcome(partial(s.priority, r))) for r in rids],
        [s.pin(p) for p in PROGRAMS],
    ))  # fmt: skip


def admission_part(life: Any) -> Any:
    ac = life.admission
    return plain((
        ac.admitted_count, ac.waiting_count, ac.program_count, ac.dropped_idle_programs,
        [(ac.knows(p), ac.admitted(p), ac.next_use_s(p, FAR_S)) for p in PROGRAMS],
    ))  # fmt: skip


def snapshot(life: Any, rids: list[str]) -> Any:
    """Every observable piece of state of the lifecycle, its parts and their policy."""
    policy = life.scheduler.policy
    return (
        scheduler_part(life, rids),
        admission_part(life),
        plain((life.held_request_ids, [life.held(r) for r in rids])),
        plain(([policy.tool_count(t) for t in TOOLS], policy.eta, policy.out_of_order_cost_s)),
    )


class LifecycleStateMachine(RuleBasedStateMachine):
    """One lifecycle per backend of ``BACKENDS``, driven in lockstep by two tenants."""

    BACKENDS: tuple[Any, ...] = ()  # set per test

    def __init__(self) -> None:
        super().__init__()
        self.lives = [build(b) for b in self.BACKENDS]
        self.now = 0.0
        self.issued: list[str] = []  # every request id arrived, ids never reused
        self.live: dict[str, str] = {}  # request -> program: arrived, not finished or ended
        self.ended: set[str] = set()  # programs ended (and not back since)

    # -- driving -------------------------------------------------------------------------------
    def running(self) -> list[str]:
        s = self.lives[0].scheduler
        return [rid for rid in self.live if s.state(rid) == "running"]

    def rids(self) -> list[str]:
        return [*self.issued[-12:], "a:nope"]

    def step(self, call: Callable[[Any], Any]) -> tuple[str, Any]:
        """``call(life)`` on every backend: the outcomes agree, and a refused call changed
        nothing. Returns the first outcome."""
        rids = self.rids()
        results = []
        for life in self.lives:
            before = snapshot(life, rids)
            result = outcome(partial(call, life))
            if result[0] == "raised":
                assert close(snapshot(life, rids), before), ("a refused call changed", result)
            results.append(result)
        for other in results[1:]:
            assert close(results[0], other), results
        kind, value = results[0]
        event(f"{kind}: {value[1][:40]}" if kind == "raised" else "ok")
        return results[0]

    def ended_program(self, ended: Any) -> None:
        """An ``Ended`` (plain): its program and requests are gone."""
        _, pid, _turns, _pin, request_ids = ended
        self.ended.add(pid)
        for rid in request_ids:
            self.live.pop(rid, None)
        assert not any(p == pid for p in self.live.values())

    def new_rid(self, tenant: str) -> str:
        rid = f"{tenant}:r{len(self.issued)}"
        self.issued.append(rid)
        return rid

    # -- rules ---------------------------------------------------------------------------------
    @rule(dt=st.sampled_from([0.0, 0.5, 0.5, 3.0, 3.0, 20.0, 45.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule(
        pid=st.sampled_from(PROGRAMS),
        blocks=st.sampled_from([0, 5, 10, 15, -1, 70, 120]),
        back_s=st.sampled_from([0.0] * 6 + [1.0]),
    )
    def arrive(self, pid: str, blocks: int, back_s: float) -> None:
        rid = self.new_rid(pid[0])
        kind, _ = self.step(lambda life: life.arrive(rid, pid, self.now - back_s, blocks))
        if kind == "ok":
            self.live[rid] = pid
            self.ended.discard(pid)

    @rule(
        rid=st.sampled_from([7, "", "a:new"]),
        pid=st.sampled_from([None, "", "b:0"]),
        blocks=st.sampled_from([5, -1, 70]),
        back_s=st.sampled_from([0.0, 1.0]),
    )
    def arrive_bad(self, rid: Any, pid: Any, blocks: int, back_s: float) -> None:
        """Bad ids with other bad arguments: the first refusal is the same on both backends."""
        if rid == "a:new":
            rid = self.new_rid("a")
        kind, _ = self.step(lambda life: life.arrive(rid, pid, self.now - back_s, blocks))
        if kind == "ok":
            self.live[rid] = pid
            self.ended.discard(pid)

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), pid=st.sampled_from(PROGRAMS))
    def arrive_again(self, data: Any, pid: str) -> None:
        """A request id already used (live or not): refused while it is live."""
        rid = data.draw(st.sampled_from(self.issued[-6:]))
        kind, _ = self.step(lambda life: life.arrive(rid, pid, self.now, 5))
        if kind == "ok":  # (an id no longer live is new again to the parts)
            self.live[rid] = pid
            self.ended.discard(pid)

    @rule(n=st.integers(1, 3), admit=st.booleans())
    def pop(self, n: int, admit: bool) -> None:
        kind, popped = self.step(lambda life: life.scheduler.pop_many(n, self.now))
        if kind == "ok" and admit:
            for rid in popped:
                self.step(partial(admit_request, rid=rid))

    @rule(
        pid=st.sampled_from(PROGRAMS),
        blocks=st.sampled_from([0, 5, 10, 15, 70]),
        tool=st.sampled_from(TOOLS),
        last=st.sampled_from([False] * 4 + [True]),
        ahead_s=st.sampled_from([0.0] * 4 + [4.0]),
    )
    def turn(self, pid: str, blocks: int, tool: Any, last: bool, ahead_s: float) -> None:
        """A call of the program arrives, runs (with whatever the queue puts first) and
        ends, most often pinned — after load control's clock ran ahead, or with more blocks
        than load control has, refused whole."""
        rid = self.new_rid(pid[0])
        kind, _ = self.step(lambda life: life.arrive(rid, pid, self.now, 5))
        if kind != "ok":
            return
        self.live[rid] = pid
        self.ended.discard(pid)
        self.step(lambda life: life.scheduler.pop_many(10, self.now))
        self.step(lambda life: life.may_run(pid, self.now + ahead_s))
        for _retry in range(2):
            kind, result = self.step(
                lambda life: life.finish(
                    rid, self.now, blocks, tool=tool, cache_miss_cost_s=PINNING_MISS_COST_S,
                    last_turn=last,
                )
            )  # fmt: skip
            if kind == "ok" or ahead_s == 0.0:
                break
            self.now += ahead_s  # the engine's clock catches up: the retry goes through
        if kind == "ok":
            self.live.pop(rid)
            if result[3] is not None:
                self.ended_program(result[3])

    @precondition(lambda self: self.issued)
    @rule(
        data=st.data(),
        blocks=st.sampled_from([0, 5, 10, 15, -1, 70, 120]),
        tool=st.sampled_from([*TOOLS, 3]),
        miss=st.sampled_from([PINNING_MISS_COST_S] * 3 + [None, -1.0]),
        last=st.sampled_from([False] * 4 + [True, 1]),
        back_s=st.sampled_from([0.0] * 6 + [1.0]),
    )
    def finish(self, data: Any, blocks: int, tool: Any, miss: Any, last: Any, back_s) -> None:
        running = self.running()  # (mostly a running request: the others are refused)
        rid = data.draw(st.sampled_from([*running, *running, *self.rids()]))
        kind, result = self.step(
            lambda life: life.finish(
                rid, self.now - back_s, blocks, tool=tool, cache_miss_cost_s=miss, last_turn=last
            )
        )
        if kind == "ok":
            self.live.pop(rid)
            if result[3] is not None:
                self.ended_program(result[3])

    @rule(data=st.data())
    def abort(self, data: Any) -> None:
        rid = data.draw(st.sampled_from([*self.live, *self.rids()]))
        kind, ended = self.step(lambda life: life.abort(rid))
        if kind == "ok":
            self.ended_program(ended)

    @rule(pid=st.sampled_from([*PROGRAMS, "b:nope"]))
    def end_program(self, pid: str) -> None:
        kind, ended = self.step(lambda life: life.end_program(pid))
        if kind == "ok":
            self.ended_program(ended)

    @rule(data=st.data())
    def admitted(self, data: Any) -> None:
        rid = data.draw(st.sampled_from([*self.rids(), 7]))
        self.step(lambda life: life.admitted(rid))

    @rule(back_s=st.sampled_from([0.0, 0.0, 1.0]))
    def expire(self, back_s: float) -> None:
        self.step(lambda life: life.expire(self.now - back_s))

    @rule(data=st.data(), ahead_s=st.sampled_from([0.0, 0.0, 4.0]))
    def may_run(self, data: Any, ahead_s: float) -> None:
        """Load control's clock may run ahead of the scheduler's: the lifecycle's next
        calls at the engine's time are refused whole until it catches up."""
        live = sorted(set(self.live.values()))
        pid = data.draw(st.sampled_from([*live, *live, *PROGRAMS, "a:nope"]))
        self.step(lambda life: life.may_run(pid, self.now + ahead_s))

    @rule(
        data=st.data(),
        short=st.sampled_from([1, 5, 10, 25, 40, -3, 2**41]),
        stalled=st.booleans(),
        for_program=st.sampled_from([None, None, "a:0", "b:1", "b:nope"]),
        answers=ANSWERS,
        back_s=st.sampled_from([0.0] * 5 + [1.0]),
    )
    def give_way(self, data, short, stalled, for_program, answers, back_s) -> None:
        held = self.lives[0].held_request_ids
        keep = data.draw(st.sampled_from([None, *held[-2:], ""]))
        self.give(self.now - back_s, short, stalled, keep, for_program, answers)

    @rule(
        answers=st.lists(st.sampled_from([10, 0, "raise", -1, True, 2**70]), max_size=4),
        stalled=st.booleans(),
    )
    def pressure(self, answers: list[Any], stalled: bool) -> None:
        """Programs get pinned until two pins are held (a turn each); then every pin is
        reclaimed (and, stalled, held chains yield), with failing releases likely among
        them."""
        s = self.lives[0].scheduler
        for pid in PROGRAMS:
            if s.pin_count >= 2:
                break
            if s.pin(pid) is None and pid not in self.live.values():
                self.turn(pid, 10, "bash", False, 0.0)
        short = s.pinned_blocks + 10
        self.give(self.now, short, stalled, None, None, answers)

    def give(self, now: float, short: int, stalled: bool, keep, for_program, answers) -> None:
        rids = self.rids()
        results, releases = [], []
        for life in self.lives:
            before = snapshot(life, rids)
            pins_before, held_before = life.scheduler.pins(), life.held_request_ids
            release = Release(answers)
            result = outcome(
                partial(life.give_way, now, short, release, stalled, keep, for_program)
            )
            if result[0] == "raised":
                self.check_failed_give_way(life, release, result, before, pins_before,
                                           held_before)  # fmt: skip
            results.append(result)
            releases.append(release.calls)
        for other, calls in zip(results[1:], releases[1:], strict=True):
            assert close(results[0], other), results
            assert calls == releases[0], "release called differently"

    def check_failed_give_way(self, life, release, result, before, pins_before, held_before):
        """The state a failed ``give_way`` leaves (lifecycle.py's module doc, "Errors")."""
        rids = self.rids()
        if not release.calls:  # an argument refused: nothing changed
            assert close(snapshot(life, rids), before)
            return
        refused = [i for i, (_, _, answer) in enumerate(release.calls) if is_refused(answer)]
        assert refused, ("give_way raised with every release answered well", result)
        pin_calls = [pid for pid, rid, _ in release.calls if rid is None]
        chain_calls = [rid for _, rid, _ in release.calls if rid is not None]
        assert len(set(pin_calls)) == len(pin_calls), "a pin released twice"
        assert release.calls[: len(pin_calls)] == [c for c in release.calls if c[1] is None]
        if refused[0] < len(pin_calls):
            assert chain_calls == [], "a held chain yielded after a pin's release failed"
        else:
            assert refused == [len(release.calls) - 1], "held chains yielded past an error"
        # the first refused answer is the error raised
        first = release.calls[refused[0]][2]
        error_type = EngineError if first == "raise" else (
            TypeError if isinstance(first, (bool, float)) else ValueError)  # fmt: skip
        assert result[1][0] is error_type, (result, first)
        s = life.scheduler
        assert plain(s.pins()) == plain([p for p in pins_before if p.program_id not in pin_calls])
        assert life.held_request_ids == [r for r in held_before if r not in chain_calls]
        after = snapshot(life, rids)
        assert close(after[1], before[1]), "load control changed"
        assert close(after[3], before[3]), "the policy changed"
        # the queue and the requests are as they were (reclaim frees pins only)
        assert close(after[0][1], before[0][1])
        assert close(after[0][0][2:4], before[0][0][2:4])

    # -- after every step ----------------------------------------------------------------------
    @invariant()
    def backends_agree(self) -> None:
        rids = self.rids()
        snaps = [snapshot(life, rids) for life in self.lives]
        for other in snaps[1:]:
            assert close(snaps[0], other), snaps

    @invariant()
    def pins_never_leak_nor_exceed_the_budget(self) -> None:
        for life in self.lives:
            s = life.scheduler
            pins = s.pins()
            assert s.pinned_blocks == sum(p.blocks for p in pins) <= BUDGET
            assert not {p.program_id for p in pins} & self.ended, "a pin of an ended program"
            for pid in self.ended:
                assert s.pin(pid) is None

    @invariant()
    def the_parts_never_drift_apart(self) -> None:
        for life in self.lives:
            s, ac = life.scheduler, life.admission
            for rid, pid in self.live.items():
                assert s.state(rid) in ("waiting", "running")
                assert ac.next_use_s(pid, FAR_S) == 0.0, f"{pid} live but not in load control"
            live_programs = set(self.live.values())
            for pid in PROGRAMS:
                if pid not in live_programs:
                    assert ac.next_use_s(pid, FAR_S) != 0.0, f"{pid} live in load control only"
            assert s.waiting_count + s.running_count == len(self.live)
            for rid in life.held_request_ids:
                assert rid in self.live, "a held chain outlived its request"


def run(backends: tuple[Any, ...], examples: int) -> None:
    machine = type("Machine", (LifecycleStateMachine,), {"BACKENDS": backends})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        ),
    )


def test_every_call_is_all_or_nothing_and_the_backends_agree(backends):
    run(backends, 60)


def test_every_call_is_all_or_nothing_on_each_backend():
    """The properties alone, on each backend (the reference's also without the native)."""
    for backend in (REFERENCE, NATIVE):
        if backend is not None:
            run((backend,), 30)
