"""Each baseline behaves as its rule says, on tiny hand-built scenarios."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import ttlpolicy as tp
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, Verdict, roofline
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.autellix import Autellix
from ttlpolicy.sim.policies.infercept import InferCept
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)
BASE = roofline("llama-3.1-8b", "h100-80g")


def hw_with(blocks: int, cpu_blocks: int = 0, base: Hardware = BASE) -> Hardware:
    per_block = 64 * base.kv_bytes_per_token
    return Hardware(base.model, base.gpu, base.steps, blocks * per_block, cpu_blocks * per_block)


def run(policy, programs, hw, cfg=CFG):
    pol = make_policy(policy) if isinstance(policy, str) else policy
    engine = Engine(hw, pol, cfg)
    engine.add_programs(programs)
    return engine, engine.run()


def agent(gap_s: float, tool: str = "tool_use", turns: int = 2, blocks: int = 100) -> Program:
    """A program whose calls of ``blocks`` blocks each extend the previous one by 1 block."""
    out = []
    for i in range(turns):
        n = (blocks + i) * 64
        out.append(
            Turn(
                n,
                8,
                (blocks + i - 1) if i else 0,
                gap_s if i else 0.0,
                tool if i < turns - 1 else None,
            )
        )
    return Program("A", tuple(out))


#: blocks B's call (250 prompt blocks, 8 output tokens) evicts from A's 100-block chain in 300
EVICTED = -(-(250 * 64 + 7) // 64) - (300 - 100)


def intruder(at_s: float, blocks: int) -> tuple[float, Program]:
    return at_s, Program("B", (Turn(blocks * 64, 8, 0, 0.0, None),))


def test_vllm_keeps_freed_blocks_until_evicted() -> None:
    # Room for A's chain and B: A's return hits.
    _, m = run("vllm", [(0.0, agent(5.0)), intruder(1.0, 50)], hw_with(400))
    assert m.recomputed_tokens == 0
    # B needs A's blocks while A is away: B holds 250 prompt blocks + 1 for its decode
    # (16000 + 7 tokens), 200 are free, so LRU evicts 51 blocks off the tail of A's chain
    # and A recomputes exactly those.
    _, m = run("vllm", [(0.0, agent(5.0)), intruder(1.0, 250)], hw_with(300))
    assert m.recomputed_tokens == EVICTED * 64


def other(at_s: float) -> tuple[float, Program]:
    """C: a 100-block call at ``at_s`` that returns much later with a new context (its chain
    sits free or pinned meanwhile, and losing it costs nothing)."""
    return at_s, Program("C", (Turn(6400, 8, 0, 0.0, "t"), Turn(6464, 8, 0, 100.0, None)))


def test_fixed_ttl_pin_protects_within_ttl_only() -> None:
    # A finishes first, C next; B then needs 51 blocks evicted (room 400 = 100 + 100 + 200).
    # vLLM evicts the least recently freed chain: A's.
    scenario = [(0.0, agent(5.0)), other(0.3), intruder(1.0, 250)]
    _, m = run("vllm", scenario, hw_with(400))
    assert m.recomputed_tokens == EVICTED * 64
    # With 10 s pins both chains are pinned; pressure reclaims the latest pin (C's), A hits.
    _, m = run("fixed-ttl=10", scenario, hw_with(400))
    assert m.recomputed_tokens == 0
    # A's gap (20 s) outlives the TTL (10 s): its pin ends, B (at 12 s) evicts from it.
    _, m = run("fixed-ttl=10", [(0.0, agent(20.0)), intruder(12.0, 250)], hw_with(300))
    assert m.recomputed_tokens == EVICTED * 64
    assert m.pinned_block_s == pytest.approx(100 * 10.0, rel=1e-9)
    # Pinned and returning within the TTL, nothing else around: held exactly the gap.
    _, m = run("fixed-ttl=10", [(0.0, agent(5.0))], hw_with(300))
    assert m.pinned_block_s == pytest.approx(100 * 5.0, rel=1e-9)


def test_continuum_pins_two_seconds_for_short_tools_only() -> None:
    # Three turns, gaps 1 s after "fast": an unseen tool counts as 0 s (the public code), so
    # the first finish pins too; each pin passes to the return 1 s later.
    _, m = run("continuum", [(0.0, agent(1.0, "fast", turns=3))], hw_with(1000))
    assert m.pinned_block_s == pytest.approx(100 * 1.0 + 101 * 1.0, rel=1e-9)
    # Gaps of 3 s: the unseen tool's first pin runs out (2 s), then mean 3 s > 2 s: no pin.
    _, m = run("continuum", [(0.0, agent(3.0, "slow", turns=3))], hw_with(1000))
    assert m.pinned_block_s == pytest.approx(100 * 2.0, rel=1e-9)
    # Gaps of 4 s after a short-mean tool: the 2 s pin expires before the return.
    prog = Program(
        "A",
        (
            Turn(6400, 8, 0, 0.0, "t"),
            Turn(6464, 8, 100, 1.0, "t"),
            Turn(6528, 8, 101, 1.0, "t"),
            Turn(6592, 8, 102, 4.0, None),
        ),
    )  # means 0, 1, 1 s: pins at every turn; the last gap is 4 s
    _e, m = run("continuum", [(0.0, prog)], hw_with(1000))
    assert m.pinned_block_s == pytest.approx(100 * 1.0 + 101 * 1.0 + 102 * 2.0, rel=1e-9)


def fake_view(running_blocks: int):
    hw = BASE
    return SimpleNamespace(
        config=CFG,
        hardware=hw,
        running_blocks=lambda: running_blocks,
        prefill_s=lambda tokens: hw.prefill_s(tokens, CFG.token_budget),
        now=0.0,
    )


def fake_call(tool: str, program: str = "A"):
    return SimpleNamespace(
        program_id=program, turn=SimpleNamespace(tool=tool), gap_s=None, prev_tool=None
    )


def test_infercept_wastes_follow_the_paper_formulas() -> None:
    pol = InferCept(prior_tool_s=10.0)
    pol.bind(fake_view(running_blocks=1000))
    w = pol.wastes(fake_call("x"), 200)
    t_fwd = BASE.prefill_s(200 * 64, 8192)
    t_swap = 200 * 64 * BASE.kv_bytes_per_token / BASE.gpu.pcie_bytes_per_s
    assert w["preserve"] == pytest.approx(10.0 * 200)
    assert w["discard"] == pytest.approx(t_fwd * 1200)
    assert w["swap"] == pytest.approx(2 * t_swap * 1200)


@pytest.mark.parametrize(
    ("tool_s", "expected"),
    [(0.001, "preserve"), (1e6, None)],  # short tools: preserve; very long: not preserve
)
def test_infercept_picks_min_waste(tool_s: float, expected: str | None) -> None:
    pol = InferCept(prior_tool_s=tool_s)
    pol.bind(fake_view(running_blocks=1000))
    w = pol.wastes(fake_call("x"), 200)
    verdict = pol.finished(fake_call("x"), 0.0, 200, last_turn=False)
    choice = min(w, key=lambda k: w[k])
    assert pol.choices == {choice: 1}
    assert (
        verdict is {"preserve": Verdict.PIN, "swap": Verdict.SWAP, "discard": Verdict.FREE}[choice]
    )
    if expected:
        assert choice == expected
    else:
        assert choice != "preserve"


def test_infercept_swaps_to_cpu_and_reloads() -> None:
    # A tool that takes forever by estimate: InferCept does not preserve; with a CPU tier and
    # a busy GPU a swap wastes least, and the return reloads instead of recomputing.
    pol = InferCept(prior_tool_s=1e4)
    _e, m = run(pol, [(0.0, agent(5.0)), intruder(1.0, 250)], hw_with(300, cpu_blocks=1000))
    assert sum(pol.choices.values()) == 1 and "preserve" not in pol.choices
    assert m.recomputed_tokens == 0
    assert m.reloaded_tokens == 100 * 64 or pol.choices["discard"] == 1


def test_autellix_least_attained_service_first() -> None:
    pol = Autellix(quantum_s=1.0, levels=4)
    assert [pol.level(s) for s in (0.0, 0.99, 1.0, 2.5, 4.0, 1e9)] == [0, 0, 1, 2, 3, 3]
    old: Any = SimpleNamespace(prog=SimpleNamespace(attained_s=50.0), issue_s=0.0)
    new: Any = SimpleNamespace(prog=SimpleNamespace(attained_s=0.0), issue_s=10.0)
    pol.arrive(old, 10.0)
    pol.arrive(new, 10.0)
    assert pol.pop() is new and pol.pop() is old


def test_vllm_is_fcfs() -> None:
    pol = make_policy("vllm")
    a: Any = SimpleNamespace(issue_s=1.0)
    b: Any = SimpleNamespace(issue_s=0.5)
    pol.arrive(a, 1.0)
    pol.arrive(b, 1.0)
    assert pol.pop() is b


def test_ttlpolicy_drives_the_library() -> None:
    """Tool durations reach the policy's history through ProgramScheduler, and a pin it
    grants is honoured by the engine (held until the program returns)."""
    slow = roofline("llama-3.1-8b", "h100-80g", efficiency=0.01)  # rebuilding is expensive
    cfg = tp.PolicyConfig(prior_mean_s=0.5, min_total_samples=1000, min_tool_samples=0)
    # (priced exactly: four calls give the fitted price no samples to learn the slow engine)
    plugin = TTLPolicyPlugin(cfg, pin_budget_fraction=1.0, adapter=False)
    _e, m = run(plugin, [(0.0, agent(0.5, turns=4))], hw_with(1000, base=slow))
    assert plugin.ttl_policy.tool_count("tool_use") == 3
    # every non-final call pinned, each pin consumed by the return 0.5 s later
    assert m.pinned_block_s == pytest.approx((100 + 101 + 102) * 0.5, rel=1e-9)
    assert m.recomputed_tokens == 0


def test_unknown_policy_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("nope")
    with pytest.raises(ValueError, match="fixed-ttl"):
        make_policy("fixed-ttl=abc")
    with pytest.raises(ValueError, match="fixed-ttl"):
        make_policy("fixed-ttl=-1")
