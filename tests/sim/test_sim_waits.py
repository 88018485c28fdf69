"""Where a program's time goes: each call's queue wait (issue → first admission), split into
programs' first calls and returning calls that kept or lost their cached prefix.

The hand-built cases run on a step of exactly 2⁻⁷ s whatever its shape, so every instant is
a count of steps, exact in binary floating point: a call of ``n`` output tokens runs ``n``
steps (its prefill step makes the first token)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, simulate
from ttlpolicy.sim.hardware import Hardware, Line, StepModel
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.workload import swe_agent_programs

STEP_S = 2.0**-7
CFG = EngineConfig(block_tokens=16, token_budget=4096, max_seqs=8)


def fixed_step(blocks: int) -> Hardware:
    hw = hw_blocks(blocks)
    flat = Line(STEP_S, 0.0, 0.0, 0.0)
    return Hardware(hw.model, hw.gpu, StepModel(flat, flat), hw.kv_capacity_bytes)


# A: a 100-block call of 16 tokens, a 1 s tool, then a call reusing those 100 blocks.
# B: arrives during A's tool, a 200-block prompt decoding 600 tokens (238 blocks at the end).
A = Program("a", (Turn(1600, 16, 0, 0.0, "t"), Turn(1700, 16, 100, 1.0, None)))
B = Program("b", (Turn(3200, 600, 0, 0.0, None),))
A2_ISSUE_S = 16 * STEP_S + 1.0
B_ARRIVAL_S = 0.5
B_FINISH_S = B_ARRIVAL_S + 600 * STEP_S


def run(blocks: int):
    engine = Engine(fixed_step(blocks), make_policy("vllm"), CFG)
    engine.add_programs([(0.0, A), (B_ARRIVAL_S, B)])
    return engine.run()


def test_a_return_that_lost_its_prefix_waits_for_the_call_holding_the_memory() -> None:
    # 250 blocks: B's prompt evicts half of A's cached chain, and A's return (107 blocks)
    # fits only once B is done.
    m = run(250)
    assert m.first_waits_s == [0.0, 0.0]  # both programs found the engine free
    assert m.return_waits_kept_s == []
    assert m.return_waits_lost_s == [B_FINISH_S - A2_ISSUE_S]
    assert m.program_finish_s["b"] == B_FINISH_S  # (the step count the wait is read from)
    s = m.summary()
    assert s["returns_kept"] == 0.0
    assert s["wait_return_lost_s"] == B_FINISH_S - A2_ISSUE_S
    assert s["wait_first_call_s"] == 0.0


def test_a_return_that_kept_its_prefix_waits_at_most_for_the_step_under_way() -> None:
    m = run(10_000)
    assert m.return_waits_lost_s == []
    [wait] = m.return_waits_kept_s
    assert 0.0 <= wait < STEP_S  # admitted at the next step boundary, B still running
    assert m.summary()["returns_kept"] == 1.0


@settings(max_examples=15, deadline=None)
@given(
    policy=st.sampled_from(["vllm", "cachettl", "continuum", "ttlpolicy", "autellix"]),
    seed=st.integers(0, 2**16),
    blocks=st.sampled_from([3_000, 20_000]),
)
def test_every_call_is_counted_once_with_a_wait_no_longer_than_the_run(
    policy: str, seed: int, blocks: int
) -> None:
    programs = swe_agent_programs(6, seed=seed)
    m = simulate(hw_blocks(blocks, 64), policy, programs, rate_per_s=0.5, seed=seed)
    calls = sum(len(p.turns) for p in programs)
    returns = m.return_waits_kept_s + m.return_waits_lost_s
    assert len(m.first_waits_s) == len(programs)
    assert len(returns) == calls - len(programs)
    assert all(0.0 <= w <= m.makespan_s for w in m.first_waits_s + returns)
    s = m.summary()
    assert s["returns_kept"] == pytest.approx(len(m.return_waits_kept_s) / len(returns))
