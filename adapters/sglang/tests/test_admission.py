"""Load control (``ttlpolicy.AdmissionControl``) in SGLang's real radix tree and scheduling
pass (CPU pools, no model), on (the default) and off (``"admission": false``).

512 KV tokens; each program's context is 300-320 tokens, so two programs' contexts exceed the
memory: with load control a program that arrives while another is away on a short tool call
waits in the queue until the first one ends (or stays away past ``max_ttl_s``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens

KV = 512
PROMPT, OUT = 300, 20
MAX_TTL_S = json.loads(TEST_POLICY)["max_ttl_s"]
ADMISSION_OFF = json.dumps({**json.loads(TEST_POLICY), "admission": False})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(clock: FakeClock) -> Iterator[MiniScheduler]:
    s = make_scheduler(KV, "ttlpolicy", clock)
    yield s
    # every program ended: nothing pinned, nothing tracked, by either library object
    assert s.cache.protected_size() == 0
    assert s.ttl.programs.program_count == 0 and s.ttl.live_requests() == 0
    if s.ttl.admission is not None:
        assert s.ttl.admission.program_count == 0


@pytest.fixture
def on(policy_env, clock) -> Iterator[MiniScheduler]:
    yield from make(clock)


@pytest.fixture
def off(policy_env, clock) -> Iterator[MiniScheduler]:
    policy_env.setenv("TTLPOLICY_POLICY", ADMISSION_OFF)
    yield from make(clock)


def first_turn(s: MiniScheduler, program: str, start: int) -> list[int]:
    """A program's first turn, ending in a call to ``bash``; returns its context."""
    prompt, out = tokens(start, PROMPT), tokens(start + PROMPT, OUT)
    req = s.submit(prompt, program=program, tool="bash")
    assert s.schedule() == [req]
    s.finish(req, out)
    return prompt + out


def test_load_control_is_on_by_default(on, off) -> None:
    assert on.ttl.admission is not None and on.ttl.policy.config.admission
    assert off.ttl.admission is None


def test_a_newcomer_waits_until_the_program_in_progress_ends(on, clock) -> None:
    ctx = first_turn(on, "a", 10_000)
    clock.advance(0.5)  # b arrives while a is away on a 1-second tool
    b = on.submit(tokens(30_000, PROMPT), program="b", last_turn=True)
    assert on.schedule() == []  # 320 + 300 > 512: held back, though a pin reclaim would fit it
    assert on.waiting == [b] and not on.ttl.admission.admitted("b")
    # and a's pin is kept: b would not run in the memory a reclaim frees (as in vLLM's
    # adapter and the simulator, a head load control holds back needs nothing)
    assert on.ttl.programs.pin("a") is not None
    assert on.cache.ttl_stats()["reclaims"] == 0
    assert on.schedule() == []  # the next pass's ordering refreshes the gauges
    assert on.cache.ttl_stats()["programs_awaiting_admission_now"] == 1
    back = on.submit(ctx + tokens(90_000, 10), program="a", last_turn=True)
    assert on.schedule() == [back], "the program in progress runs; b still waits"
    assert back.prefix_len == PROMPT + OUT
    on.finish(back, tokens(91_000, 4))  # a ends: its context leaves the working set
    assert on.schedule() == [b]
    on.finish(b, tokens(92_000, 4))


def test_off_the_newcomer_runs_at_once(off, clock) -> None:
    ctx = first_turn(off, "a", 10_000)
    clock.advance(0.5)
    b = off.submit(tokens(30_000, PROMPT), program="b", last_turn=True)
    assert off.schedule() == [b], "as before load control: the pin yields, b runs"
    off.finish(b, tokens(92_000, 4))
    back = off.submit(ctx + tokens(90_000, 10), program="a", last_turn=True)
    assert off.schedule() == [back]
    assert back.prefix_len < PROMPT + OUT, "b's tokens evicted part of a's context"
    off.finish(back, tokens(91_000, 4))


def test_a_program_that_never_returns_blocks_nobody_past_max_ttl(on, clock) -> None:
    first_turn(on, "gone", 10_000)  # its client dies during the tool call
    clock.advance(0.5)
    b = on.submit(tokens(30_000, PROMPT), program="b", last_turn=True)
    assert on.schedule() == []
    clock.advance(MAX_TTL_S)
    assert on.schedule() == [b]
    on.finish(b, tokens(92_000, 4))
    assert on.ttl.admission.admitted("gone")  # still admitted, out of the working set
    on.ttl.programs.end_program("gone")  # what the dead client never did
    on.ttl.admission.end("gone")


def test_an_abort_while_held_back_ends_the_program(on, clock) -> None:
    ctx = first_turn(on, "a", 10_000)
    clock.advance(0.5)
    b = on.submit(tokens(30_000, PROMPT), program="b")
    assert on.schedule() == [] and on.ttl.admission.program_count == 2
    on.abort_waiting(b)
    assert on.ttl.admission.program_count == 1
    back = on.submit(ctx + tokens(90_000, 10), program="a", last_turn=True)
    assert on.schedule() == [back]
    on.finish(back, tokens(91_000, 4))
