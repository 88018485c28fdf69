"""A program is its tenant's alone, in SGLang's real radix tree and scheduling pass.

The tenant is the request's ``cache_salt`` (what a gateway sets per tenant).  A stranger
naming the owner's program id — from another tenant, or without a salt — takes no pin and
ends nothing; the owner's return finds its whole first turn cached although two other
requests needed the memory during its tool call.  Within a tenant, a request naming a pinned
program takes the pin if its prompt continues the pinned context, and otherwise supersedes it
(the pin released at once, the request served as the program's).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conftest import FakeClock, MiniScheduler, make_scheduler, tokens
from ttlpolicy.ids import tenant_key

KV = 512
TURN1, OUT1, FILLER = 200, 20, 200


def owner_return_after(stranger: Callable[[MiniScheduler], None]) -> tuple[int, MiniScheduler]:
    """The owner's turn 1 (tenant "salt-a", program "p"), ``stranger`` during the tool call,
    two fillers needing the memory, then the owner's return; its cached prefix length."""
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    prompt, out = tokens(10_000, TURN1), tokens(10_000 + TURN1, OUT1)
    req = s.submit(prompt, program="p", tool="bash", cache_salt="salt-a")
    assert s.schedule() == [req]
    s.finish(req, out)
    assert s.cache.protected_size() == TURN1 + OUT1  # pinned
    stranger(s)
    for i in range(2):
        filler = s.submit(tokens(50_000 + i * 1000, FILLER))
        assert s.schedule() == [filler]
        s.finish(filler, tokens(50_900 + i * 1000, 4))
    back = s.submit(
        prompt + out + tokens(90_000, 30), program="p", last_turn=True, cache_salt="salt-a"
    )
    assert s.schedule() == [back]
    s.finish(back, tokens(91_000, 4))
    return back.prefix_len, s


def run_stranger(salt: str | None, last_turn: bool = False) -> Callable[[MiniScheduler], None]:
    def stranger(s: MiniScheduler) -> None:
        req = s.submit(tokens(70_000, 40), program="p", last_turn=last_turn, cache_salt=salt)
        assert s.schedule() == [req]
        s.finish(req, tokens(71_000, 4))

    return stranger


def test_the_owner_alone_finds_its_context(policy_env) -> None:
    hit, _ = owner_return_after(lambda s: None)
    assert hit == TURN1 + OUT1


@pytest.mark.parametrize("salt", ["salt-b", None], ids=["other-tenant", "no-salt"])
@pytest.mark.parametrize("last_turn", [False, True], ids=["turn", "last-turn"])
def test_another_tenant_naming_the_id_takes_and_ends_nothing(policy_env, salt, last_turn) -> None:
    hit, _ = owner_return_after(run_stranger(salt, last_turn))
    assert hit == TURN1 + OUT1


def test_another_tenants_abort_ends_nothing(policy_env) -> None:
    def stranger(s: MiniScheduler) -> None:
        req = s.submit(tokens(70_000, 40), program="p", cache_salt="salt-b")
        s.order()  # seen to arrive
        s.abort_waiting(req)
        assert s.cache.protected_size() == TURN1 + OUT1

    hit, _ = owner_return_after(stranger)
    assert hit == TURN1 + OUT1


def test_within_a_tenant_a_call_not_continuing_supersedes_the_pin(policy_env) -> None:
    """Issue 45 part 3 (was: served as anonymous, the pin kept to its TTL): the program's own
    call with an unrelated prompt — a compaction — releases the pin's locks at once and is
    served as the program's next call; the old context, no longer locked, is evicted by the
    fillers, so a return to it finds less than all of it."""
    hit, s = owner_return_after(run_stranger("salt-a"))
    assert hit < TURN1 + OUT1
    # the compaction superseded the owner's pin, the return to the old context the new one
    assert s.ttl.metrics.contexts_superseded == 2


def test_a_continuing_call_takes_the_pin_and_supersedes_nothing(policy_env) -> None:
    hit, s = owner_return_after(lambda s: None)
    assert hit == TURN1 + OUT1
    assert s.ttl.metrics.contexts_superseded == 0


def test_a_flooding_tenant_gives_its_share_back(policy_env) -> None:
    """Tenant A's pins fill the pin budget; tenant B's turn then takes its share back from A
    (A's latest pin is released in the tree, B's locked): the tree's protected tokens are
    exactly the pins the library holds."""
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    budget = s.ttl.pin_budget_tokens
    a = 0
    while s.cache.protected_size() + 60 <= budget:  # A's turns, pinned while they fit
        req = s.submit(tokens(20_000 + a * 100, 56), program=f"a{a}", tool="bash",
                       cache_salt="salt-a")  # fmt: skip
        assert s.schedule() == [req]
        s.finish(req, tokens(20_060 + a * 100, 4))
        a += 1
    assert a >= 2 and s.ttl.programs.pin_count == a
    req = s.submit(tokens(40_000, 56), program="b", tool="bash", cache_salt="salt-b")
    assert s.schedule() == [req]
    s.finish(req, tokens(40_060, 4))
    held = s.ttl.pins.held_tokens()
    assert s.cache.protected_size() == held <= budget
    assert s.ttl.programs.pin_count == a  # B pinned, one of A's released
    assert s.ttl.metrics.reclaims >= 1


def test_each_tenants_tool_gaps_feed_its_own_window(policy_env) -> None:
    """A call's tool gap feeds its tenant's window of that tool name (``ToolHistory``: the
    library reads the tenant from the program id the adapter namespaces): two tenants' ``ts``
    keep apart, and the shared namespace learns nothing of either."""
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    for i, (salt, tool) in enumerate([("salt-a", "ta"), ("salt-a", "ts"), ("salt-b", "ts")]):
        req = s.submit(tokens(10_000 * (i + 1), 40), program=f"p{i}", tool=tool, cache_salt=salt)
        assert s.schedule() == [req]
        s.finish(req, tokens(10_000 * (i + 1) + 40, 4))
        clock.advance(1.0)
        back = s.submit(tokens(10_000 * (i + 1), 50), program=f"p{i}", last_turn=True,
                        cache_salt=salt)  # fmt: skip
        assert s.schedule() == [back]
        s.finish(back, tokens(10_000 * (i + 1) + 50, 4))
    a, b = tenant_key("salt-a"), tenant_key("salt-b")
    counts = {
        (who, tool): s.ttl.policy.tool_count(tool, who or "")
        for who in (a, b, None)
        for tool in ("ta", "ts")
    }
    assert counts == {
        (a, "ta"): 1, (a, "ts"): 1, (b, "ta"): 0, (b, "ts"): 1, (None, "ta"): 0, (None, "ts"): 0
    }  # fmt: skip
