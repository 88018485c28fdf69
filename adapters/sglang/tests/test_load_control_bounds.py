"""Load control's bounds in SGLang's real radix tree and scheduling pass (CPU pools, no
model): a lone program in flight holds nobody back, anonymous requests are never held back,
and a request the library's full program table refuses is served, not an engine crash.

512 KV tokens; a 300-token program's context leaves no room for a newcomer expected to grow
to the admitted mean (300 + 300 > 512), though a small one fits beside it."""

from __future__ import annotations

import pytest

from conftest import FakeClock, make_scheduler, tokens
from ttlpolicy.reference.admission import MAX_PROGRAMS

KV = 512
PROMPT, OUT = 300, 20


@pytest.fixture
def s(policy_env):
    return make_scheduler(KV, "ttlpolicy", FakeClock())


def test_a_lone_program_in_flight_does_not_hold_a_newcomer_back(s) -> None:
    a = s.submit(tokens(10_000, PROMPT), program="a", tool="bash")
    assert s.schedule() == [a]
    b = s.submit(tokens(30_000, 40), program="b", last_turn=True)
    assert s.schedule() == [b]  # a runs alone: it has no idle context to keep
    s.finish(b, tokens(31_000, 4))
    s.finish(a, tokens(10_000 + PROMPT, OUT))


def test_an_anonymous_request_is_never_held_back(s) -> None:
    a = s.submit(tokens(10_000, PROMPT), program="a", tool="bash")
    assert s.schedule() == [a]
    s.finish(a, tokens(10_000 + PROMPT, OUT))  # away on bash: its context is kept for it
    c = s.submit(tokens(20_000, 40), program="c", last_turn=True)
    assert s.schedule() == []  # 320 + max(40, 320) > 512: load control holds c
    s.abort_waiting(c)  # (its client goes away)
    anon = s.submit(tokens(30_000, 40))
    assert s.schedule() == [anon]  # the same size, anonymous: served as stock
    s.finish(anon, tokens(31_000, 4))


def test_a_request_beyond_the_librarys_program_table_is_served(s) -> None:
    admission = s.ttl.admission
    for i in range(MAX_PROGRAMS):  # live programs (never idle: none is forgotten)
        admission.arrive(f"x{i}", 0.0, 0)
    prog = s.submit(tokens(10_000, 40), program="new-program", tool="bash")
    anon = s.submit(tokens(20_000, 40))
    assert s.schedule() == [prog, anon]  # untracked, in queue order: no exception
    s.finish(prog, tokens(11_000, 4))
    s.finish(anon, tokens(21_000, 4))
    assert s.schedule() == []
    assert admission.program_count == MAX_PROGRAMS
    assert s.ttl.programs.program_count == 0 and s.ttl.live_requests() == 0


def test_a_request_the_full_table_refuses_is_linked_once(policy_env) -> None:
    """A request without an id that the library cannot track waits in SGLang's queue and is
    asked again each pass: it keeps the program it was linked to the first time, so a long
    wait neither counts a new program a pass nor makes the linker forget others."""
    policy_env.setenv("TTLPOLICY_INFER_PROGRAMS", "1")
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    big = s.submit(tokens(10_000, 480))
    assert s.schedule() == [big]  # (running: what is left does not hold the next one)
    clock.advance(1.0)
    admission = s.ttl.admission
    for i in range(MAX_PROGRAMS - admission.program_count):  # the table full
        admission.arrive(f"x{i}", clock.now, 0)
    waiting = s.submit(tokens(20_000, 200))
    for _ in range(5):
        assert s.schedule() == []
    stats = s.cache.ttl_stats()
    assert stats["calls_new_program"] == 2, stats  # big's and the waiting one's, once each
    assert s.ttl.inferred.linker.program_count == 2
    s.finish(big, tokens(11_000, 4))
    assert s.schedule() == [waiting]  # untracked, served as stock
    s.finish(waiting, tokens(21_000, 4))
    assert s.schedule() == []
    assert s.ttl.inferred.linker.program_count == 1  # big's turn end; the untracked one's gone
    assert not s.ttl.inferred.tracks(waiting.rid)
