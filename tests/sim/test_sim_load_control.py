"""The simulator's ttlpolicy with load control (``ttlpolicy.AdmissionControl``): the engine's
eviction hook, the variant names of the ablation, and admission keeping a program's working
set resident where stock eviction would thrash it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, Verdict, roofline
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.kv_cache import KVCache
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)
#: 1 % of peak: a 200-block context takes ~20 s to rebuild, far more than a 2 s tool gap
SLOW = roofline("llama-3.1-8b", "h100-80g", efficiency=0.01)


def hw_with(blocks: int, base: Hardware = SLOW) -> Hardware:
    return hw_blocks(blocks, CFG.block_tokens, base=base)


def test_kv_cache_evicts_in_the_policys_order() -> None:
    kv = KVCache(30)
    for program in ("a", "b", "c"):
        kv.acquire(program, 0, 10)
    for program in ("a", "b", "c"):
        kv.release(program, 10, 10, Verdict.FREE)
    kv.eviction_order = lambda programs: sorted(programs, reverse=True)  # c, b, a
    kv.acquire("d", 0, 15)
    assert (kv.chain_blocks("a"), kv.chain_blocks("b"), kv.chain_blocks("c")) == (10, 5, 0)
    kv.check()


@pytest.mark.parametrize(
    "name, admission, evict, pin_fraction",
    [
        ("ttlpolicy", True, True, 0.5),
        ("ttlpolicy:admission", False, True, 0.5),
        ("ttlpolicy:evict+pins", True, False, 0.0),
        ("ttlpolicy-offload:pins", True, True, 0.0),
        ("ttlpolicy:classic", False, False, 0.5),
    ],
)
def test_variant_names_switch_mechanisms_off(name, admission, evict, pin_fraction) -> None:
    pol = make_policy(name)
    assert isinstance(pol, TTLPolicyPlugin)
    Engine(hw_with(100), pol, CFG)  # binds the policy
    cfg = pol.ttl_policy.config
    assert (cfg.admission, cfg.evict_by_next_use) == (admission, evict)
    assert pol.pin_budget_fraction == pin_fraction
    assert pol.name == name
    assert (pol.eviction_order() is not None) == evict


def test_unknown_mechanism_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'tiering'"):
        make_policy("ttlpolicy:tiering")


def two_programs() -> list[tuple[float, Program]]:
    """A: three calls of ~200 blocks, 2 s tool gaps; B: one 200-block call arriving at 1 s.
    The engine holds 300 blocks: A's context and B's call do not fit together."""
    a = Program(
        "A",
        tuple(
            Turn(
                (200 + i) * 64,
                8,
                (200 + i - 1) if i else 0,
                2.0 if i else 0.0,
                "tool_use" if i < 2 else None,
            )
            for i in range(3)
        ),
    )
    b = Program("B", (Turn(200 * 64, 8, 0, 0.0, None),))
    return [(0.0, a), (1.0, b)]


def run(name: str):
    engine = Engine(hw_with(300), make_policy(name), CFG)
    engine.add_programs(two_programs())
    m = engine.run()
    assert m.programs_done == 2
    return m


def test_admission_keeps_the_working_set_resident() -> None:
    # B would evict A's context while A is in a 2 s gap; rebuilding it takes ~20 s, so A's
    # context is in the working set and B waits until A ends: A never recomputes.  Priced
    # exactly: two programs give the adapter's fit no samples (it would price the rebuild at
    # the configured line's 1.3 s, too little to make B wait).
    assert run("ttlpolicy:exact").recomputed_tokens == 0


def test_without_admission_the_scenario_thrashes() -> None:
    # the same scenario bites without admission (else the test above proves little)
    assert run("ttlpolicy:admission+pins").recomputed_tokens > 0
    assert run("vllm").recomputed_tokens > 0


def test_both_backends_drive_the_simulation_alike(monkeypatch) -> None:
    """End to end: the plug-in on the Rust classes and on the Python reference gives the same
    run (admission, eviction order, pins and queue all agree on a workload under pressure)."""
    import types

    import ttlpolicy as tp
    from ttlpolicy.reference import admission, lifecycle, policy, scheduler
    from ttlpolicy.sim import simulate, swe_agent_programs
    from ttlpolicy.sim.policies import ttlpolicy_plugin

    if tp.backend != "rust":
        pytest.skip("native module not built")
    programs = swe_agent_programs(16, seed=4)
    hw = hw_with(3000, base=roofline("llama-3.1-8b", "h100-80g"))
    native = simulate(hw, "ttlpolicy", programs, rate_per_s=2.0, seed=1, config=CFG).summary()
    reference = types.SimpleNamespace(
        PolicyConfig=tp.PolicyConfig,
        TTLPolicy=policy.TTLPolicy,
        ProgramScheduler=scheduler.ProgramScheduler,
        AdmissionControl=admission.AdmissionControl,
        ProgramLifecycle=lifecycle.ProgramLifecycle,
    )
    monkeypatch.setattr(ttlpolicy_plugin, "tp", reference)
    python = simulate(hw, "ttlpolicy", programs, rate_per_s=2.0, seed=1, config=CFG).summary()
    assert python == native
    assert native["recomputed_tokens"] > 0 or native["preemptions"] > 0  # under pressure


@given(
    chains=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    keys=st.lists(st.floats(-1e3, 1e3), min_size=8, max_size=8),
    grows=st.lists(st.integers(1, 10), min_size=1, max_size=5),
    cpu=st.sampled_from([0, 20]),
)
def test_one_allocation_evicts_what_one_per_call_would(chains, keys, grows, cpu) -> None:
    """The engine allocates a step's decode growth at once (``Engine._apply``); that evicts
    the same blocks, in the same order, as one allocation per call, when the eviction order
    sorts by a key of each program's own (as the library's does)."""

    def cache() -> KVCache:
        kv = KVCache(sum(chains) + 4, cpu)
        for i, blocks in enumerate(chains):
            kv.acquire(f"p{i}", 0, blocks)
        for i, blocks in enumerate(chains):
            kv.release(f"p{i}", blocks, blocks, Verdict.FREE)
        kv.eviction_order = lambda programs: sorted(programs, key=lambda p: keys[int(p[1:])])
        return kv

    total = min(sum(grows), sum(chains) + 4)
    each, once = cache(), cache()
    left = total
    for g in grows:
        g = min(g, left)
        if g:
            assert each.grow(g)
        left -= g
    assert once.grow(total)
    for kv in (each, once):
        kv.check()
    state = [
        (kv.used, kv.cached, kv.evicted_blocks, kv.offloaded_blocks, kv.cpu_used,
         dict(kv._free), list(kv._free), dict(kv._chain), list(kv._cpu.items()))
        for kv in (each, once)
    ]  # fmt: skip
    assert state[0] == state[1]
