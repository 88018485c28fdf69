"""ttlpolicy-offload parking a chain in the CPU tier during its tool call and copying it back
ahead of the predicted return (``ttlpolicy-offload:park``, the library's ``plan_park``
executed by the simulator), and the measure it is judged by: the returns whose tool outlasts
a reload, and how many of them find their prefix on the GPU at arrival."""

from __future__ import annotations

import pytest

from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, Verdict, roofline
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.kv_cache import KVCache
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_park import TTLPolicyPark

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)
BASE = roofline("llama-3.1-8b", "h100-80g")
TOOL_S = 30.0


def hw_with(blocks: int, cpu_blocks: int) -> Hardware:
    per_block = 64 * BASE.kv_bytes_per_token
    return Hardware(BASE.model, BASE.gpu, BASE.steps, blocks * per_block, cpu_blocks * per_block)


def agent(gap_s: float) -> Program:
    """Two calls of 100 blocks, the second extending the first, ``gap_s`` apart (a tool)."""
    return Program("A", (Turn(100 * 64, 8, 0, 0.0, "bash"), Turn(101 * 64, 8, 100, gap_s, None)))


def crowd() -> Program:
    """One call of 180 blocks: on a 200-block GPU it evicts whatever chain is free."""
    return Program("B", (Turn(180 * 64, 8, 0, 0.0, None),))


def run(name: str, gap_s: float = TOOL_S, history_s: float | None = TOOL_S):
    policy = make_policy(name)
    engine = Engine(hw_with(200, 2000), policy, CFG)
    if history_s is not None and isinstance(policy, TTLPolicyPark):
        for _ in range(20):  # the tool's recorded durations: always ``history_s``
            policy.durations.observe("bash", history_s)
    engine.add_programs([(0.0, agent(gap_s)), (2.0, crowd())])
    m = engine.run()
    engine.kv.check()
    return policy, engine, m


def test_a_return_that_outlasts_a_reload_finds_its_chain_back_on_the_gpu() -> None:
    # the other program evicts A's chain to the CPU during the tool; it is copied back just
    # before the predicted return, so the return reads nothing from the CPU
    policy, engine, m = run("ttlpolicy-offload:park+admission")
    assert isinstance(policy, TTLPolicyPark)
    assert (policy.parked, policy.prefetched) == (1, 1)
    assert engine.kv.offloaded_blocks > 0 and engine.kv.prefetched_blocks > 0
    assert (m.long_returns, m.long_returns_on_gpu) == (1, 1)
    assert m.reloaded_tokens == 0
    # pinned only while the copy ran: not through the tool call
    reload_s = engine.hw.transfer_s(100 * 64)
    assert 0.0 < m.pinned_block_s <= 101 * reload_s * 1.001


def test_without_the_prefetch_the_same_return_reloads() -> None:
    # the measure can fail: the offloading engine without a prefetch reloads at arrival
    _, _, m = run("vllm-offload")
    assert (m.long_returns, m.long_returns_on_gpu) == (1, 0)
    assert m.reloaded_tokens >= 80 * 64  # (the part the crowd evicted)


def test_a_return_before_the_predicted_one_reloads_as_before() -> None:
    policy, _, m = run("ttlpolicy-offload:park+admission", gap_s=10.0)
    assert isinstance(policy, TTLPolicyPark)
    assert (policy.parked, policy.prefetched) == (1, 0)  # the copy was not due yet
    assert (m.long_returns, m.long_returns_on_gpu) == (1, 0)
    assert m.reloaded_tokens >= 80 * 64  # (the part the crowd evicted)


def test_no_history_no_park() -> None:
    policy, _, m = run("ttlpolicy-offload:park+admission", history_s=None)
    assert isinstance(policy, TTLPolicyPark) and policy.parked == 0
    assert m.programs_done == 2


def test_returns_quicker_than_a_reload_are_not_counted() -> None:
    _, _, m = run("vllm-offload", gap_s=1e-6)
    assert m.long_returns == 0 and m.summary()["long_returns_on_gpu"] == 0.0


def test_hold_keeps_the_chain_pinned_till_the_window_ends() -> None:
    policy, _, m = run("ttlpolicy-offload:park-hold+admission")
    assert isinstance(policy, TTLPolicyPark) and policy.hold
    assert (m.long_returns, m.long_returns_on_gpu) == (1, 1)


def test_park_needs_the_cpu_tier() -> None:
    with pytest.raises(ValueError, match="park"):
        make_policy("ttlpolicy:park")


def test_the_oracle_bound_times_the_copy_by_the_real_gap() -> None:
    # no history at all: the bound reads the call's own next gap from the trace
    policy, _, m = run("ttlpolicy-offload:park-oracle+admission", history_s=None)
    assert isinstance(policy, TTLPolicyPark) and policy.oracle
    assert (policy.parked, policy.prefetched) == (1, 1)
    assert (m.long_returns, m.long_returns_on_gpu) == (1, 1)


def test_keep_pins_a_free_chain_where_it_is() -> None:
    kv = KVCache(100, 100)
    kv.take("A", 40)
    kv.release("A", 40, 30, Verdict.FREE)
    assert kv.keep("A") == 30
    assert (kv.used, kv.pinned, kv.cached, kv.chain_blocks("A")) == (30, 30, 0, 30)
    assert kv.keep("A") == 0 and kv.keep("nobody") == 0  # pinned already; no chain
    kv.check()
    kv.unpin("A")
    assert (kv.used, kv.pinned, kv.cached) == (0, 0, 30)
    kv.check()
