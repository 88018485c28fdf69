"""ProgramLifecycle: the Rust core and the Python reference agree on any interleaving of
calls (hypothesis stateful testing: results, errors by type and message, the calls made to
``release``, every view after each step); and, on both backends, a held chain never outlives
its request, ``give_way`` reclaims pins first, never releases ``keep``'s chain, never a held
chain when not stalled, and yields held chains latest-arrived first, stopping once the step
is covered."""

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

PROGRAMS = ["A", "B", "C", "D"]
TOOLS = [None, "bash", "grep"]
TOTAL, BUDGET = 100, 40

#: What the recording ``release`` answers, call after call: block counts (a shared chain
#: frees nothing: 0), and now and then a bad answer or an exception.
ANSWERS = st.lists(
    st.one_of(*[st.integers(0, 30)] * 4, st.sampled_from([-1, True, 2.5, "raise"])),
    max_size=6,
)


class Release:
    """Answers from a script, recording each call (the engine's side of ``give_way``)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, program_id: str, request_id: str | None) -> Any:
        self.calls.append((program_id, request_id))
        answer = self.answers.pop(0) if self.answers else 10
        if answer == "raise":
            raise ValueError("the engine could not free them")
        return answer


def views(life: Any) -> Any:
    """Every view of the lifecycle and its parts, as plain values (no view moves a clock)."""
    ac = life.admission
    return plain((
        life.held_request_ids, life.held_count, [life.held(f"r{i}") for i in range(40)],
        life.may_give_way(True), life.may_give_way(False), scheduler_snapshot(life.scheduler),
        None if ac is None else (ac.admitted_count, ac.waiting_count, ac.program_count,
                                 [(ac.knows(p), ac.admitted(p)) for p in PROGRAMS]),
    ))  # fmt: skip


def build(impl: Any, with_admission: bool, admission_on: bool) -> Any:
    # The cold-start prior of 10 s decides every TTL: pins are common (gaps of 0 s in the
    # tool windows would decide τ = 0 and leave nothing to hold).
    config = PolicyConfig(
        min_tool_samples=1000, min_total_samples=1000, prior_mean_from_history=False,
        admission=admission_on,
    )  # fmt: skip
    policy = impl.TTLPolicy(config)
    s = impl.ProgramScheduler(policy, TOTAL, BUDGET)
    return impl.ProgramLifecycle(
        s, impl.AdmissionControl(policy, TOTAL) if with_admission else None
    )


def check_give_way(life: Any, op: tuple, held_before: list[str], result: tuple, call) -> None:
    """The properties of one ``give_way``: pins first, held chains only when stalled, latest
    first, never ``keep``'s, and none once the step was covered."""
    short, stalled, keep, answers = op
    chains = [(p, r) for p, r in call.calls if r is not None]
    event(f"give_way {result[0]}: pins released {len(call.calls) - len(chains) > 0}, "
          f"chains released {len(chains) > 0}")  # fmt: skip
    assert all(r is None for _, r in call.calls[: len(call.calls) - len(chains)]), "pins first"
    if not stalled or short <= 0:
        assert chains == [], "a held chain yielded with no stall"
    assert all(r != keep for _, r in chains), "keep's chain yielded"
    expected_order = [r for r in reversed(held_before) if r != keep]
    assert [r for _, r in chains] == expected_order[: len(chains)], "not latest-arrived first"
    if result[0] == "ok":
        # every release but the last came while the step was still short (pins are released
        # as the scheduler's reclaim chose them, all at once)
        answers = [*answers, *[10] * len(call.calls)]  # as Release answers them
        remaining = short
        for i, (_, r) in enumerate(call.calls):
            if r is not None:
                assert remaining > 0, "a chain yielded after the step was covered"
            remaining -= answers[i]
        assert remaining == result[1]
        assert all(r not in life.held_request_ids for _, r in chains)


def admit_request(life: Any, rid: str) -> Any:
    return life.admitted(rid)


def check_holds(life: Any) -> None:
    """A held chain never outlives its request: every held request is live."""
    s = life.scheduler
    for rid in life.held_request_ids:
        assert s.state(rid) in ("waiting", "running")
    assert life.held_count <= s.waiting_count + s.running_count


class LifecycleMachine(RuleBasedStateMachine):
    """Drives one lifecycle per backend in ``BACKENDS`` in lockstep, as an engine would (and
    with bad calls mixed in)."""

    BACKENDS: tuple[Any, ...] = ()  # set per test
    WITH_ADMISSION = True
    ADMISSION_ON = True

    def __init__(self) -> None:
        super().__init__()
        self.lives = [build(b, self.WITH_ADMISSION, self.ADMISSION_ON) for b in self.BACKENDS]
        self.now = 0.0
        self.issued: list[str] = []  # every request id arrived (ids are never reused)
        self.popped: list[str] = []  # every request id popped

    def step(self, call: Callable[[Any], Any]) -> Any:
        """``call(life)`` on every backend; the outcomes must agree. Returns the first."""
        results = [outcome(partial(call, life)) for life in self.lives]
        for r in results[1:]:
            assert close(results[0], r), results
        for life in self.lives:
            check_holds(life)
        return results[0]

    def give(self, short: int, stalled: bool, keep, for_program, answers, now: float) -> None:
        held_before = list(self.lives[0].held_request_ids)
        releases = []

        def call(life):
            release = Release(answers)
            releases.append(release)
            return life.give_way(now, short, release, stalled=stalled, keep=keep,
                                 for_program=for_program)  # fmt: skip

        result = self.step(call)
        for life, release in zip(self.lives, releases, strict=True):
            check_give_way(life, (short, stalled, keep, answers), held_before, result, release)
        assert all(r.calls == releases[0].calls for r in releases), "release called differently"

    # -- rules ---------------------------------------------------------------------------------
    @rule(dt=st.sampled_from([0.0, 0.5, 3.0, 40.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    def _arrive(self, pid: str, blocks: int) -> str:
        rid = f"r{len(self.issued)}"
        self.issued.append(rid)
        self.step(lambda life: life.arrive(rid, pid, self.now, blocks))
        return rid

    @rule(pid=st.sampled_from(PROGRAMS), blocks=st.integers(-1, 15))
    def arrive(self, pid: str, blocks: int) -> None:
        self._arrive(pid, blocks)

    @precondition(lambda self: self.lives[0].scheduler.pin_count)
    @rule(data=st.data(), blocks=st.integers(0, 15))
    def returns(self, data, blocks: int) -> None:
        """A pinned program's next call: its pin is handed over, and held."""
        pins = self.lives[0].scheduler.pins()
        self._arrive(data.draw(st.sampled_from([p.program_id for p in pins])), blocks)

    @precondition(lambda self: self.lives[0].scheduler.pin_count)
    @rule(blocks=st.integers(0, 15))
    def all_return(self, blocks: int) -> None:
        """Every pinned program's next call arrives: several chains held at once."""
        for pin in self.lives[0].scheduler.pins():
            self._arrive(pin.program_id, blocks)

    @rule(pid=st.sampled_from(PROGRAMS), blocks=st.integers(1, 15), tool=st.sampled_from(TOOLS))
    def turn(self, pid: str, blocks: int, tool) -> None:
        """A call of the program arrives, runs (with whatever the queue puts first) and ends
        with a tool call, pinned when the budget has room."""
        rid = self._arrive(pid, blocks)
        self._pop(3, True)
        if rid in self.popped:
            self.step(
                lambda life: life.finish(
                    rid, self.now, blocks, tool=tool, cache_miss_cost_s=PINNING_MISS_COST_S
                )
            )

    @rule(n=st.integers(1, 3), admit=st.booleans())
    def pop(self, n: int, admit: bool) -> None:
        self._pop(n, admit)

    def _pop(self, n: int, admit: bool) -> None:
        kind, popped = self.step(lambda life: life.scheduler.pop_many(n, self.now))
        if kind == "ok":
            self.popped.extend(popped)
            for rid in popped if admit else ():
                self.step(partial(admit_request, rid=rid))

    @precondition(lambda self: self.popped)
    @rule(data=st.data())
    def admitted(self, data) -> None:
        rid = data.draw(st.sampled_from(self.popped[-4:]))
        self.step(lambda life: life.admitted(rid))

    @precondition(lambda self: self.popped)
    @rule(
        data=st.data(),
        blocks=st.integers(0, 15),
        tool=st.sampled_from(TOOLS),
        miss=st.sampled_from([PINNING_MISS_COST_S] * 3 + [None, -1.0]),
        last=st.sampled_from([False] * 4 + [True]),
    )
    def finish(self, data, blocks, tool, miss, last) -> None:
        rid = data.draw(st.sampled_from(self.popped[-4:]))
        self.step(
            lambda life: life.finish(
                rid, self.now, blocks, tool=tool, cache_miss_cost_s=miss, last_turn=last
            )
        )

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def abort(self, data) -> None:
        rid = data.draw(st.sampled_from(self.issued[-6:]))
        self.step(lambda life: life.abort(rid))

    @rule(pid=st.sampled_from(PROGRAMS))
    def end(self, pid: str) -> None:
        self.step(lambda life: life.end_program(pid))

    @rule()
    def expire(self) -> None:
        self.step(lambda life: life.expire(self.now))

    @rule(pid=st.sampled_from(PROGRAMS))
    def may_run(self, pid: str) -> None:
        self.step(lambda life: life.may_run(pid, self.now))

    @rule(
        data=st.data(),
        short=st.one_of(st.integers(1, 40), st.integers(-5, 60)),
        stalled=st.sampled_from([True, True, False]),
        for_program=st.sampled_from([None, None, *PROGRAMS[:2]]),
        answers=ANSWERS,
    )
    def give_way(self, data, short, stalled, for_program, answers) -> None:
        held = self.lives[0].held_request_ids
        keep = data.draw(st.sampled_from([None, *held[-2:]]))
        self.give(short, stalled, keep, for_program, answers, self.now)

    @precondition(lambda self: self.lives[0].held_count)
    @rule(data=st.data(), short=st.integers(1, 40), answers=ANSWERS)
    def stall(self, data, short: int, answers) -> None:
        """Nothing runs and the head is short: held chains yield (but ``keep``'s)."""
        keep = data.draw(st.sampled_from([None, *self.lives[0].held_request_ids]))
        self.give(short, True, keep, None, answers, self.now)

    @rule(stalled=st.booleans())
    def give_way_late(self, stalled: bool) -> None:
        """A second back in time: refused alike when pins are held (reclaim checks the
        time), else served alike."""
        self.give(1, stalled, None, None, [], self.now - 1.0)

    # -- after every step ----------------------------------------------------------------------
    @invariant()
    def views_agree(self) -> None:
        v = [views(life) for life in self.lives]
        for other in v[1:]:
            assert close(v[0], other), v


def _run(backends: tuple[Any, ...], with_admission: bool, admission_on: bool) -> None:
    machine = type(
        "Machine",
        (LifecycleMachine,),
        {"BACKENDS": backends, "WITH_ADMISSION": with_admission, "ADMISSION_ON": admission_on},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=60,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        ),
    )


def test_backends_agree_on_any_interleaving(backends):
    for with_admission, admission_on in ((True, True), (True, False), (False, False)):
        _run(backends, with_admission, admission_on)


def test_holds_and_give_way_properties_on_each_backend():
    """The properties alone, on each backend (the reference's also without the native)."""
    for backend in (REFERENCE, NATIVE):
        if backend is not None:
            _run((backend,), True, True)
