"""Superseded contexts in the simulator (issue 45 part 3): a program's call that does not
continue its pinned context releases the pin at its arrival (``ttlpolicy.pin_claims``, as the
adapters), and ``sim.pin_ledger`` books the pinned block-seconds no call read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ttlpolicy as tp
from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Verdict
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.workload import poisson_arrivals, swe_agent_programs

BLOCK = 16
THINK_S = 0.5


def pinning(claims: str) -> TTLPolicyPlugin:
    """The plug-in pinning every call (a lost prefix priced at 100 s, no budget limit)."""
    return TTLPolicyPlugin(
        tp.PolicyConfig(prefill_base_s=100.0), pin_budget_fraction=1.0, pin_claims=claims
    )


def compaction_while_busy(policy: TTLPolicyPlugin) -> tuple[Engine, float]:
    """``a``'s first call (20 blocks) is pinned; ``b`` then decodes for seconds in the one
    sequence slot; ``a``'s second call, a compaction keeping 2 of the 20 blocks, arrives
    ``THINK_S`` later and waits for the slot.  Returns the engine and ``a``'s first finish."""
    a = Program("a", (Turn(320, 2, 0, 0.0, "bash"), Turn(48, 2, 2, THINK_S, None)))
    b = Program("b", (Turn(32, 4000, 0, 0.0, None),))
    engine = Engine(hw_blocks(400), policy, EngineConfig(BLOCK, 2048, max_seqs=1))
    engine.add_programs([(0.0, a), (0.0, b)])
    finishes: list[float] = []
    inner = policy.finished

    def finished(call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        if call.program_id == "a" and not finishes:
            finishes.append(now)
        return inner(call, now, chain_blocks, last_turn)

    policy.finished = finished  # type: ignore[method-assign]
    m = engine.run()
    engine.kv.check()
    assert m.programs_done == 2
    assert m.makespan_s > finishes[0] + 5 * THINK_S  # (``a`` waited behind ``b``)
    return engine, finishes[0]


def test_a_compaction_releases_the_pin_at_its_arrival() -> None:
    policy = pinning("supersede")
    engine, _ = compaction_while_busy(policy)
    m = engine.metrics
    assert policy.contexts_superseded == 1
    # pinned from the first finish to the compaction's arrival (at the end of the step it
    # came in: ms), not to its admission, seconds later; read by no call (released first)
    assert 20 * THINK_S <= m.pinned_block_s < 20 * THINK_S * 1.02
    assert m.pinned_in_vain_block_s == pytest.approx(m.pinned_block_s, rel=1e-9)
    assert m.in_vain_by_program == {"a": pytest.approx(m.pinned_block_s, rel=1e-9)}
    book = policy.not_continued_block_s
    assert book == {"before_arrival": pytest.approx(m.pinned_block_s), "after_arrival": 0.0}


def test_taking_the_pin_holds_it_while_the_call_waits() -> None:
    policy = pinning("take")
    engine, _ = compaction_while_busy(policy)
    m = engine.metrics
    assert policy.contexts_superseded == 0
    assert m.pinned_block_s > 5 * 20 * THINK_S  # held until the admission, seconds later
    # the call read 2 of the 20 blocks: the other 18 were pinned in vain
    assert m.pinned_in_vain_block_s == pytest.approx(m.pinned_block_s * 18 / 20, rel=1e-9)
    book = policy.not_continued_block_s  # (the plug-in's book agrees with the engine's)
    assert book["before_arrival"] + book["after_arrival"] == pytest.approx(m.pinned_block_s)


def test_refusing_serves_the_call_as_anonymous_and_books_the_pin_left() -> None:
    policy = pinning("refuse")
    compaction_while_busy(policy)
    assert policy.pin_claims_refused == 1 and policy.contexts_superseded == 0
    book = policy.not_continued_block_s
    assert book["before_arrival"] == pytest.approx(20 * THINK_S, rel=0.02)
    assert book["after_arrival"] > 5 * 20 * THINK_S  # to the pin's deadline, the 100 s price


def test_a_continuing_program_supersedes_nothing() -> None:
    policy = pinning("supersede")
    turns = (Turn(320, 2, 0, 0.0, "bash"), Turn(352, 2, 20, THINK_S, "bash"))
    engine = Engine(hw_blocks(400), policy, EngineConfig(BLOCK, 2048, max_seqs=1))
    engine.add_programs([(0.0, Program("a", (*turns, Turn(384, 2, 22, THINK_S, None))))])
    m = engine.run()
    assert policy.contexts_superseded == 0
    assert m.pinned_block_s > 0.0
    # each return read its whole pin (20, then 22 blocks): nothing pinned in vain
    assert m.pinned_in_vain_block_s == pytest.approx(0.0, abs=1e-9)


def test_variant_words_choose_the_claim_rule() -> None:
    assert make_policy("ttlpolicy").pin_claims == "supersede"  # type: ignore[attr-defined]
    assert make_policy("ttlpolicy:refuse-claims").pin_claims == "refuse"  # type: ignore[attr-defined]
    assert make_policy("ttlpolicy:take-claims").pin_claims == "take"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="clash"):
        make_policy("ttlpolicy:take-claims+refuse-claims")
    with pytest.raises(ValueError, match="pin_claims"):
        TTLPolicyPlugin(pin_claims="keep")


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 1000), st.sampled_from(["supersede", "take", "refuse"]))
def test_the_ledger_books_every_pinned_block_second_once(seed: int, claims: str) -> None:
    programs = swe_agent_programs(12, seed=seed)  # (64-token blocks; some rewrite nothing)
    largest = max(-(-t.input_tokens // 64) for p in programs for t in p.turns)
    hw = hw_blocks(2 * largest, 64)
    engine = Engine(hw, pinning(claims), EngineConfig(64, 2048, max_seqs=4))
    engine.add_programs(poisson_arrivals(programs, 0.5, seed))
    m = engine.run()
    engine.kv.check()
    assert engine.kv.booked_block_s == pytest.approx(m.pinned_block_s, rel=1e-9, abs=1e-6)
    assert 0.0 <= m.pinned_in_vain_block_s <= m.pinned_block_s * (1 + 1e-9) + 1e-6
    assert sum(m.in_vain_by_program.values()) == pytest.approx(
        m.pinned_in_vain_block_s, rel=1e-9, abs=1e-6
    )
