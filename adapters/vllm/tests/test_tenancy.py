"""A program is its tenant's alone, on a real vLLM engine (CPU).

The scenarios of a hostile client (issue 44) with the tenant taken from the request's
``cache_salt``: a stranger naming another tenant's program id — with an unrelated prompt,
with ``last_turn``, or aborting — moves, ends and aborts nothing of it, and the owner's return
finds its whole context cached as it would without the stranger (two filler requests during
the tool call need the memory, so a pin that was taken or released is evicted).  Within a
tenant, a request naming a pinned program takes the pin if it continues the context, and
otherwise supersedes it: the pin is released at once, the request served as the program's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_engine import FILLER, NUM_BLOCKS, TURN1_OUT, TURN1_PROMPT, Prompts, context_of

from conftest import ttl_engine
from ttlpolicy.ids import program_key, tenant_key
from vllm_engine import BLOCK, TEST_POLICY, Engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]


@pytest.fixture(scope="module")
def engine(tiny_model) -> Iterator[Engine]:
    yield from ttl_engine(tiny_model, TEST_POLICY, "0.75", NUM_BLOCKS)


@pytest.fixture
def ttl(engine: Engine) -> Iterator[Engine]:
    yield engine
    engine.run()
    # a stranger's own pin expires; then the engine is as the next test expects it:
    # nothing pinned, every block free
    sched = engine.scheduler
    assert engine.clock is not None
    engine.clock.advance(1000.0)
    engine.turn([5] * 8, 1)  # a step expires the pins
    assert sched.pins.held_blocks() == 0 and sched.programs.pin_count == 0
    assert engine.free_blocks() == NUM_BLOCKS - 1


def owner_return_after(engine: Engine, seed: int, stranger: Any) -> tuple[int, int]:
    """The owner's turn 1 (tenant "salt-a", program ``f"p{seed}"``), then
    ``stranger(engine, prompts, program)`` during the tool call, two fillers needing the
    memory, then the owner's turn 2.  Returns (turn 2's cached tokens, turn 1's whole
    blocks).  (Each test's program id is its own: a stranger's program that came back a
    test later would teach the policy a 1,000 s gap and turn the owner's pin off.)"""
    p, program = Prompts(engine, seed), f"p{seed}"
    a1 = p(TURN1_PROMPT)
    out1 = engine.turn(a1, TURN1_OUT, program_id=program, tool="bash", cache_salt="salt-a")
    ctx = context_of(a1, out1)
    assert engine.scheduler.pins.held_blocks() == 7  # the owner's context is pinned
    assert engine.clock is not None
    engine.clock.advance(1.0)
    stranger(engine, p, program)
    engine.turn(p(FILLER), 8)
    engine.turn(p(FILLER), 8)
    out2 = engine.turn(
        ctx + p(20), 4, program_id=program, tool="bash", last_turn=True, cache_salt="salt-a"
    )
    return out2.num_cached_tokens, ((len(ctx) - 1) // BLOCK) * BLOCK


def test_the_owner_alone_finds_its_context(ttl) -> None:
    hit, whole = owner_return_after(ttl, 11, lambda e, p, program: None)
    assert hit == whole == 7 * BLOCK


@pytest.mark.parametrize("salt", ["salt-b", None], ids=["other-tenant", "no-salt"])
def test_another_tenant_naming_the_id_takes_no_pin(ttl, salt) -> None:
    def stranger(e: Engine, p: Prompts, program: str) -> None:
        e.turn(p(40), 4, program_id=program, tool="bash", cache_salt=salt)

    hit, whole = owner_return_after(ttl, 12, stranger)
    assert hit == whole, "the owner's pin survived the stranger's request"


def test_another_tenants_last_turn_ends_nothing(ttl) -> None:
    def stranger(e: Engine, p: Prompts, program: str) -> None:
        before = e.scheduler.pins.held_blocks()
        e.turn(p(40), 4, program_id=program, last_turn=True, cache_salt="salt-b")
        assert e.scheduler.pins.held_blocks() == before

    hit, whole = owner_return_after(ttl, 13, stranger)
    assert hit == whole


def test_another_tenants_abort_ends_nothing(ttl) -> None:
    def stranger(e: Engine, p: Prompts, program: str) -> None:
        before = e.scheduler.pins.held_blocks()
        rid = e.submit(p(40), 4, program_id=program, cache_salt="salt-b")
        e.abort(rid)
        assert e.scheduler.pins.held_blocks() == before

    hit, whole = owner_return_after(ttl, 14, stranger)
    assert hit == whole


def test_within_a_tenant_a_call_not_continuing_supersedes_the_pin(ttl) -> None:
    """Issue 45 part 3 (was: served as anonymous, the pin kept to its TTL): the program's own
    call with an unrelated prompt — a compaction — releases the pin at once and is served as
    the program's next call, whose own context is pinned in turn; the old context, no longer
    pinned, is evicted by the fillers, so a call back to it finds less than all of it."""
    stats = ttl.scheduler.ttl_stats
    superseded = stats()["contexts_superseded"]
    key = program_key(tenant_key("salt-a"), "p15")

    def same_tenant_compaction(e: Engine, p: Prompts, program: str) -> None:
        assert e.scheduler.pins.blocks_of(key) == 7
        out = e.turn(p(70), 4, program_id=program, tool="bash", cache_salt="salt-a")
        assert out.num_cached_tokens == 0
        assert stats()["contexts_superseded"] == superseded + 1  # released at its arrival
        # served as the program: its new context (73 tokens computed: 2 blocks) is its pin now
        assert e.scheduler.pins.blocks_of(key) == 2
        assert e.scheduler.pins.held_blocks() == 2

    hit, whole = owner_return_after(ttl, 15, same_tenant_compaction)
    assert hit < whole  # the old context lost its pin: the fillers evicted some of it
    # (the return to the old context does not continue the new one: superseded in turn)
    assert stats()["contexts_superseded"] == superseded + 2


def test_a_continuing_call_takes_the_pin_and_supersedes_nothing(ttl) -> None:
    superseded = ttl.scheduler.ttl_stats()["contexts_superseded"]
    hit, whole = owner_return_after(ttl, 16, lambda e, p, program: None)
    assert hit == whole
    assert ttl.scheduler.ttl_stats()["contexts_superseded"] == superseded


@pytest.mark.parametrize(
    ("salt", "sees"), [("salt-b", False), (None, False), ("salt-a", True)],
    ids=["other-tenant", "no-salt", "same-tenant"],
)  # fmt: skip
def test_a_pin_keeps_nothing_probe_able_by_another_tenant(ttl, salt, sees) -> None:
    """A timing probe (issue 44): while the owner's context is pinned, a request of another
    tenant (or of none) sending the owner's very prompt finds none of it cached — vLLM keys
    block hashes by ``cache_salt`` — so the pin holds nothing another tenant can time; within
    the tenant (the trust boundary) the same probe does find it."""
    p, program = Prompts(ttl, 17), "p17"
    a1 = p(TURN1_PROMPT)
    out1 = ttl.turn(a1, TURN1_OUT, program_id=program, tool="bash", cache_salt="salt-a")
    assert ttl.scheduler.pins.held_blocks() == 7
    probe = ttl.turn(a1, 1, cache_salt=salt)
    assert (probe.num_cached_tokens > 0) is sees
    back = ttl.turn(
        context_of(a1, out1) + p(20), 4, program_id=program, last_turn=True, cache_salt="salt-a"
    )
    assert back.num_cached_tokens == 7 * BLOCK  # the probe took nothing from the owner


def test_each_tenants_tool_gaps_feed_its_own_window(ttl) -> None:
    """A call's tool gap feeds its tenant's window of that tool name (``ToolHistory``: the
    library reads the tenant from the program id the adapter namespaces): two tenants' ``xs``
    keep apart, and the shared namespace learns nothing of either.  (Last in the module: the
    gaps it teaches stay in the engine's policy.)"""
    sched = ttl.scheduler
    p = Prompts(ttl, 90)
    calls = [("salt-a", "xa"), ("salt-a", "xs"), ("salt-b", "xs")]
    for i, (salt, tool) in enumerate(calls):
        first = p(40)
        out = ttl.turn(first, 4, program_id=f"tools{i}", tool=tool, cache_salt=salt)
        assert ttl.clock is not None
        ttl.clock.advance(1.0)
        ttl.turn(context_of(first, out) + p(8), 4, program_id=f"tools{i}", last_turn=True,
                 cache_salt=salt)  # fmt: skip
    a, b = tenant_key("salt-a"), tenant_key("salt-b")
    counts = {
        (who, tool): sched.policy.tool_count(tool, who or "")
        for who in (a, b, None)
        for tool in ("xa", "xs")
    }
    assert counts == {
        (a, "xa"): 1, (a, "xs"): 1, (b, "xa"): 0, (b, "xs"): 1, (None, "xa"): 0, (None, "xs"): 0
    }  # fmt: skip
