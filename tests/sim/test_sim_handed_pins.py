"""A pin handed over when its program's next call arrives: by default the engine frees the
chain then (it stays cached, evictable); a policy with ``holds_handed_pins`` has it held
until that call is admitted, as ``ttlpolicy_vllm.TTLScheduler`` holds a handed-over pin's
blocks (``ttlpolicy:adapter`` does, through ``ttlpolicy.ProgramLifecycle``, whose
``give_way`` also lets held chains yield to a head when nothing runs).  In virtual time the
simulator lost a block of such a chain to a call admitted ahead of it, where vLLM kept it
(bench/RESULTS.md, "Simulator fidelity — reclaimed ahead of the step, held until
admitted")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import ttlpolicy as tp
from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.fixed_ttl import FixedTTL
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.workload import poisson_arrivals, swe_agent_programs

BLOCK = 16
CAPACITY = 60  # KV blocks


class HeldFixedTTL(FixedTTL):
    holds_handed_pins = True


def pinning_plugin() -> TTLPolicyPlugin:
    """The library's plug-in pinning every call: a lost prefix priced at 100 s (the
    configured line: too few prefill samples for a fit), no pin budget limit."""
    return TTLPolicyPlugin(tp.PolicyConfig(prefill_base_s=100.0), pin_budget_fraction=1.0)


def run(policy: FixedTTL) -> tuple[Engine, int]:
    # ``a`` (20 blocks of prompt) returns the instant its first call ends, pinned; ``b`` is
    # decoding and holds 21 blocks to its end; ``c`` (20 blocks) has waited since 0 for a
    # sequence slot and is ahead of ``a``'s return in the queue (request FCFS).  When ``a``'s
    # call ends only 19 blocks are free besides ``a``'s chain.
    a = Program("a", (Turn(320, 2, 0, 0.0, "bash"), Turn(336, 2, 20, 0.0, None)))
    b = Program("b", (Turn(320, 10, 0, 0.0, None),))
    c = Program("c", (Turn(319, 2, 0, 0.0, None),))
    engine = Engine(hw_blocks(CAPACITY), policy, EngineConfig(BLOCK, 2048, max_seqs=2))
    engine.add_programs([(0.0, a), (0.0, b), (0.0, c)])
    metrics = engine.run()
    engine.kv.check()
    assert metrics.programs_done == 3
    return engine, metrics.hit_tokens


def test_a_handed_over_chain_is_free_from_the_arrival_by_default() -> None:
    # ``c`` is admitted on ``a``'s return and evicts one block of ``a``'s chain (free since
    # the return): ``a``'s second call finds 19 of its 20 blocks.
    _, hit_tokens = run(FixedTTL(100.0))
    assert hit_tokens == 19 * BLOCK


def test_a_held_handed_over_chain_survives_until_its_call_is_admitted() -> None:
    # Held, the chain is not ``c``'s to evict: ``c`` waits for ``b`` to end, and ``a``'s
    # second call, admitted after it, finds all 20 blocks (its prompt's 21st is partial).
    engine, hit_tokens = run(HeldFixedTTL(100.0))
    assert hit_tokens == 20 * BLOCK
    assert engine.kv.pinned == 0 and engine.kv.used == 0  # the hold ended at admission


def test_the_library_plugin_holds_handed_pins_as_the_adapter() -> None:
    assert TTLPolicyPlugin.holds_handed_pins is True
    assert getattr(FixedTTL(1.0), "holds_handed_pins", False) is False


def test_held_chains_yield_to_the_head_when_nothing_runs() -> None:
    # ``a`` and ``d`` (7 blocks each) return the instant their first calls end, pinned: their
    # chains are held (14 of 24 blocks) while their second calls (11 blocks, 4 new) wait
    # behind ``b``, which grows past the 10 blocks left and is preempted.  Nothing runs then
    # and ``b`` heads the queue needing 11 blocks: held chains yield, the later arrival's
    # (``d``) first, until it fits — as TTLScheduler's do (``ProgramLifecycle.give_way``,
    # stalled).  Without that, the engine stalls.
    a = Program("a", (Turn(112, 2, 0, 0.0, "bash"), Turn(176, 2, 7, 0.0, None)))
    d = Program("d", (Turn(112, 2, 0, 0.0, "bash"), Turn(176, 2, 7, 0.0, None)))
    b = Program("b", (Turn(128, 100, 0, 0.0, None),))
    engine = Engine(hw_blocks(24), pinning_plugin(), EngineConfig(BLOCK, 2048, max_seqs=3))
    engine.add_programs([(0.0, a), (0.0, d), (0.0, b)])
    metrics = engine.run()
    engine.kv.check()
    assert metrics.programs_done == 3 and metrics.preemptions >= 1
    assert engine.kv.pinned == 0 and engine.kv.used == 0
    # a's second call finds its whole chain (held throughout); d's lost blocks to b's growth
    kept, lost = metrics.return_waits_kept_s, metrics.return_waits_lost_s
    assert len(kept) == 1 and len(lost) == 1
    assert 7 * BLOCK <= metrics.hit_tokens < 14 * BLOCK


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    programs=st.integers(3, 10),
    spare=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    pin_all=st.booleans(),  # the library's plug-in pinning every call, or as it decides
    max_seqs=st.sampled_from([2, 4, 16]),
    rate_per_s=st.sampled_from([0.5, 2.0, 10.0]),
)
def test_the_queue_always_makes_progress_with_held_chains(
    seed: int,
    programs: int,
    spare: float,
    pin_all: bool,
    max_seqs: int,
    rate_per_s: float,
) -> None:
    # Memory from just the largest call to twice it: held chains, preemptions and pins all
    # compete, and every call still fits alone.  Every program must end (no stall).
    progs = swe_agent_programs(programs, seed=seed)
    largest = max(-(-(t.input_tokens + t.output_tokens) // 64) for p in progs for t in p.turns)
    policy = pinning_plugin() if pin_all else make_policy("ttlpolicy")
    engine = Engine(
        hw_blocks(largest + int(largest * spare), 64), policy, EngineConfig(64, 2048, max_seqs)
    )
    engine.add_programs(poisson_arrivals(progs, rate_per_s, seed=seed))
    metrics = engine.run()
    engine.kv.check()
    assert metrics.programs_done == programs
    assert engine.kv.pinned == 0
