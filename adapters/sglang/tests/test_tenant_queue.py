"""SGLang's prefill pass asks load control about other tenants' first requests when the head
is refused (``ttlpolicy.serving.tenant_probe``; issue 44, "Fair shares"), in SGLang's real
radix tree and scheduling pass (CPU pools, no model).

512 KV tokens.  Tenant A keeps two 200-token programs in flight (no lone program: no bounded
wait), over its share of the working set once B is active; A's new 200-token program does not
fit beside them (400 + 200 > 512) and heads the queue, refused.  B's new program, sent a
moment later (not of the newcomer's cohort, which load control admits together), starts at
the next pass; A's newcomer is still held.  Without tenants (no ``cache_salt``) the later
program waits behind the refused one, as before tenants.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import FakeClock, make_scheduler, tokens

KV = 512
PROMPT, OUT = 200, 20


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def s(policy_env: Any, clock: FakeClock) -> Any:
    return make_scheduler(KV, "ttlpolicy", clock)


def newcomers(s: Any, clock: FakeClock, tenants: bool) -> tuple[Any, Any]:
    salt_a, salt_b = ("salt-a", "salt-b") if tenants else (None, None)
    a0 = s.submit(tokens(10_000, PROMPT), program="a0", tool="bash", cache_salt=salt_a)
    a1 = s.submit(tokens(20_000, PROMPT), program="a1", tool="bash", cache_salt=salt_a)
    assert s.schedule() == [a0, a1]
    clock.advance(0.5)
    a_new = s.submit(tokens(30_000, PROMPT), program="a-new", cache_salt=salt_a)
    assert s.schedule() == []  # 400 + 200 > 512: load control holds A's newcomer
    clock.advance(0.5)
    b_new = s.submit(tokens(40_000, 40), program="b-new", cache_salt=salt_b)
    return a_new, b_new


def test_a_tenant_over_its_share_holds_back_its_own_newcomer_only(s, clock) -> None:
    a_new, b_new = newcomers(s, clock, tenants=True)
    assert s.schedule() == [b_new]  # at the next pass, past A's refused newcomer
    assert s.waiting == [a_new]


def test_with_one_tenant_the_later_program_waits_behind_the_refused_one(s, clock) -> None:
    a_new, b_new = newcomers(s, clock, tenants=False)
    assert s.schedule() == []
    assert set(map(id, s.waiting)) == {id(a_new), id(b_new)}


def test_one_tenant_s_many_waiting_programs_hide_no_other_tenant_s(s, clock) -> None:
    # A queues more newcomers than the probe reads in all (``MAX_SCANNED``), each refused
    # (A is over its share): B's program, behind them all, is still asked and starts at once
    from ttlpolicy.serving.tenant_probe import MAX_SCANNED

    a0 = s.submit(tokens(10_000, PROMPT), program="a0", tool="bash", cache_salt="salt-a")
    a1 = s.submit(tokens(20_000, PROMPT), program="a1", tool="bash", cache_salt="salt-a")
    assert s.schedule() == [a0, a1]
    clock.advance(0.5)
    flood = [
        s.submit(tokens(50_000 + 1_000 * i, PROMPT), program=f"a-new{i}", cache_salt="salt-a")
        for i in range(MAX_SCANNED + 1)
    ]
    assert s.schedule() == []  # load control holds A's newcomers
    clock.advance(0.5)
    b_new = s.submit(tokens(40_000, 40), program="b-new", cache_salt="salt-b")
    assert s.schedule() == [b_new]
    assert {id(r) for r in s.waiting} == {id(r) for r in flood}
