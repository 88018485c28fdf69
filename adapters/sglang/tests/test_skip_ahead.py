"""Past a head of the queue too large for memory (``ttlpolicy.serving.skip_ahead``), in SGLang's
real radix tree and scheduling pass (CPU pools, no model).

512 KV tokens.  ``a`` (300 tokens) runs; ``b`` (300) heads the queue and does not fit beside
it: SGLang's pass stops at it (``NO_TOKEN``).  With the skip (``TTLPOLICY_SKIP_DEPTH``; by
default on only with HiCache, which this rig has not) ``c`` (40 tokens), behind ``b``, runs at
once, taken out of turn; ``b`` keeps its place and runs when ``a`` ends.  Without it ``c``
waits for ``b``.  Load control is off: it would hold ``b`` back as a new program."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens

KV = 512
ADMISSION_OFF = json.dumps({**json.loads(TEST_POLICY), "admission": False})


def make(policy_env: pytest.MonkeyPatch, depth: str | None) -> Iterator[MiniScheduler]:
    policy_env.setenv("TTLPOLICY_POLICY", ADMISSION_OFF)
    if depth is not None:
        policy_env.setenv("TTLPOLICY_SKIP_DEPTH", depth)
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    yield s
    # every request settled with the ProgramScheduler: a taken one is not popped again
    assert s.ttl.programs.waiting_count == 0 and s.ttl.live_requests() == 0
    assert s.ttl.programs.program_count == 0


@pytest.fixture
def skipping(policy_env: pytest.MonkeyPatch) -> Iterator[MiniScheduler]:
    yield from make(policy_env, "8")


@pytest.fixture(params=["0", None])  # off, and the default without HiCache
def in_order(
    policy_env: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[MiniScheduler]:
    yield from make(policy_env, request.param)


def start(s: MiniScheduler) -> tuple[object, object, object]:
    a = s.submit(tokens(10_000, 300), program="a", last_turn=True)
    assert s.schedule() == [a]
    b = s.submit(tokens(20_000, 300), program="b", last_turn=True)
    c = s.submit(tokens(30_000, 40), program="c", last_turn=True)
    return a, b, c


def test_a_request_that_fits_passes_a_head_that_does_not(skipping: MiniScheduler) -> None:
    s = skipping
    a, b, c = start(s)
    assert s.schedule() == [c]  # beside a, past b
    assert s.waiting == [b]
    s.finish(c, tokens(31_000, 4))
    s.finish(a, tokens(11_000, 4))
    assert s.schedule() == [b]  # b kept its place: the head once a's memory is free
    # (the tracker learns of an admission at the next pass: counted there)
    assert s.cache.ttl_stats()["queue_skips"] == 1
    s.finish(b, tokens(21_000, 4))


def test_without_the_skip_the_pass_stops_at_the_head(in_order: MiniScheduler) -> None:
    s = in_order
    a, b, c = start(s)
    assert s.schedule() == []  # vLLM's and SGLang's order: c waits for b, b for a
    s.finish(a, tokens(11_000, 4))
    assert s.schedule() == [b, c]
    assert s.cache.ttl_stats()["queue_skips"] == 0
    s.finish(b, tokens(21_000, 4))
    s.finish(c, tokens(31_000, 4))
