"""Tenants share the pin budget, on a real vLLM engine (CPU): one tenant flooding programs
does not take another's pin (issue 44, "Pin budget taken by one client").

24 usable blocks of 32 tokens, pin budget 0.75 (18 blocks).  The flood tenant runs nine
programs whose 2-block turns are pinned and never return: the whole budget.  Then the victim's
7-block turn: with tenants (``cache_salt`` per tenant) it is within its share (9 blocks) and
takes its budget back from the flood's latest pins (``Finished.released``, freed by the
adapter), so two fillers during its tool call (5 blocks each: what the pins leave free) do not
evict it and its return finds its whole context cached.  In one pool (no salts: one tenant, as
before tenants) its turn gets no pin and the fillers evict it.  (Heavier fillers would make
the adapter reclaim pins: the anonymous fillers' tenant is then active too, three shares of 6
blocks, and the victim's 7-block pin is over its share — see
docs/investigations/tenant-shares.md.)
"""

from __future__ import annotations

import pytest
from test_engine import TURN1_OUT, TURN1_PROMPT, Prompts, context_of
from test_tenancy import engine, ttl  # the same engine and checks between tests

from vllm_engine import BLOCK, Engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]
__all__ = ["engine", "ttl"]  # fixtures

FLOOD_PROGRAMS = 9  # 2 blocks each: the whole budget of 18
FILLER_TOKENS = 150  # each filler holds 5 blocks: what the pins leave free, no reclaim


def victim_return_after_flood(engine: Engine, seed: int, tenants: bool) -> tuple[int, int]:
    """The flood, the victim's turn 1, two fillers, the victim's turn 2: (turn 2's cached
    tokens, turn 1's whole blocks in tokens)."""
    p = Prompts(engine, seed)
    flood_salt, victim_salt = ("salt-flood", "salt-victim") if tenants else (None, None)
    for i in range(FLOOD_PROGRAMS):
        engine.turn(p(80), 4, program_id=f"f{seed}-{i}", tool="bash", cache_salt=flood_salt)
    assert engine.scheduler.pins.held_blocks() == 2 * FLOOD_PROGRAMS  # the whole budget
    assert engine.clock is not None
    engine.clock.advance(1.0)
    a1 = p(TURN1_PROMPT)
    program = f"v{seed}"
    out1 = engine.turn(a1, TURN1_OUT, program_id=program, tool="bash", cache_salt=victim_salt)
    ctx = context_of(a1, out1)
    engine.clock.advance(1.0)
    engine.turn(p(FILLER_TOKENS), 8)
    engine.turn(p(FILLER_TOKENS), 8)
    out2 = engine.turn(ctx + p(20), 4, program_id=program, last_turn=True, cache_salt=victim_salt)
    return out2.num_cached_tokens, ((len(ctx) - 1) // BLOCK) * BLOCK


def test_a_flooding_tenant_leaves_another_its_pin(ttl) -> None:
    hit, whole = victim_return_after_flood(ttl, 31, tenants=True)
    assert hit == whole == 7 * BLOCK


def test_in_one_pool_the_flood_costs_the_victim_its_context(ttl) -> None:
    hit, whole = victim_return_after_flood(ttl, 32, tenants=False)
    assert hit < whole  # the scenario does flood: without tenants the victim loses
