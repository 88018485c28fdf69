"""The simulator's ``ttlpolicy:adapter`` follows the vLLM adapter's rules (``TTLScheduler``,
what users deploy), each stated here with the adapter's line it comes from; the default
``ttlpolicy`` keeps the simulator's exact prefill time as its miss cost.
``adapters/vllm/tests/test_fidelity_logic.py`` runs both side by side on vLLM's scheduler."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pytest

from sim_hardware import hw_blocks
from ttlpolicy import PolicyConfig
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.profile import prefill_shape

BLOCK = 16
CFG = EngineConfig(block_tokens=BLOCK, token_budget=2048, max_seqs=8)
DEFAULTS = PolicyConfig()  # the miss-cost model's coefficients before it has a fit


def ttl(name: str) -> TTLPolicyPlugin:
    plugin = make_policy(name)
    assert isinstance(plugin, TTLPolicyPlugin)
    return plugin


class _Recorder:
    """Records what the plug-in hands the library: ``observe_prefill`` samples and each
    ``ProgramLifecycle.finish``'s arguments; everything else passes through."""

    def __init__(self, target: Any, log: list[tuple[str, Any]], method: str) -> None:
        self._target, self._log, self._method = target, log, method

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name != self._method:
            return attr

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self._log.append((name, (args, kwargs)))
            return attr(*args, **kwargs)

        return recorded


def run(hw: Hardware, programs: list[tuple[float, Program]], policy: str = "ttlpolicy"):
    plugin = ttl(policy)
    engine = Engine(hw, plugin, CFG)  # binds the plug-in
    log: list[tuple[str, Any]] = []
    plugin.ttl_policy = _Recorder(plugin.ttl_policy, log, "observe_prefill")
    plugin.life = cast(Any, _Recorder(plugin.life, log, "finish"))
    engine.add_programs(programs)
    metrics = engine.run()
    engine.kv.check()
    return engine, metrics, log


def lone_step_s(hw: Hardware, chunk: int, start: int) -> float:
    return hw.steps.step_s(*prefill_shape(chunk, start))


def samples(log: list[tuple[str, Any]]) -> list[tuple[int, float, int]]:
    return [args for name, (args, _) in log if name == "observe_prefill"]


def test_a_prefill_sample_is_a_new_calls_first_chunk_and_its_steps_seconds() -> None:
    # TTLScheduler._after_schedule sums num_scheduled_tokens over scheduled_new_reqs (the
    # first chunk of each request admitted in the step; its later chunks are running
    # requests), and update_from_output passes them with the step's seconds and the tokens
    # cached before them to TTLPolicy.observe_prefill.  One program alone: a 5000-token
    # prompt runs in chunks of 2048, 2048, 904 and gives one sample, 2048 tokens at a lone
    # 2048-token step; its
    # return (5000 + 40 output + 300 new) hits the 314 full blocks of the 5039 tokens of KV
    # and gives 5340 - 5024 = 316 tokens at 5024.
    hw = hw_blocks(1000)
    first = Turn(5000, 40, 0, 0.0, "bash")
    second = Turn(5340, 5, 314, 2.0, None)
    _, _, log = run(hw, [(0.0, Program("A", (first, second)))])
    assert samples(log) == [
        (2048, pytest.approx(lone_step_s(hw, 2048, 0), rel=1e-12), 0),
        (316, pytest.approx(lone_step_s(hw, 316, 5024), rel=1e-12), 5024),
    ]


def test_first_chunks_of_one_step_are_one_sample() -> None:
    # Two programs admitted together share their first step: one sample of 300 + 500 tokens
    # priced at that step's time (the sum of both chunks' shapes).
    hw = hw_blocks(1000)
    a = Program("A", (Turn(300, 3, 0, 0.0, None),))
    b = Program("B", (Turn(500, 3, 0, 0.0, None),))
    _, _, log = run(hw, [(0.0, a), (0.0, b)])
    shape = np.add(prefill_shape(300, 0), prefill_shape(500, 0))
    assert samples(log) == [(800, pytest.approx(hw.steps.step_s(*shape), rel=1e-12), 0)]


def test_a_resumed_preempted_call_gives_no_sample() -> None:
    # vLLM lists a request resumed after preemption in scheduled_resumed_reqs, not
    # scheduled_new_reqs (Scheduler.schedule, vllm/v1/core/sched/scheduler.py, "elif
    # request.status == RequestStatus.PREEMPTED"), so the adapter takes no sample from its
    # recomputation.  10 blocks, two calls of 64 + 60 tokens that both outgrow them: B is
    # preempted and recomputes its prompt and output later; the only sample is the first step.
    hw = hw_blocks(10)
    a = Program("A", (Turn(64, 60, 0, 0.0, None),))
    b = Program("B", (Turn(64, 60, 0, 0.0, None),))
    _, metrics, log = run(hw, [(0.0, a), (0.0, b)])
    assert metrics.preemptions >= 1
    assert [n for n, *_ in samples(log)] == [128]


def _returning_program(turns: int) -> Program:
    # Each turn returns with a different number of new tokens, so the prefill samples have
    # distinct sizes (the fit needs three).
    out, ctx, cached, seq = 8, 0, 0, []
    for i in range(turns):
        new = 100 + 150 * i
        ctx += new
        seq.append(Turn(ctx, out, cached, 1.0 if i else 0.0, "bash"))
        cached = (ctx + out - 1) // BLOCK
        ctx += out
    return Program("A", tuple(seq))


def test_a_lost_prefix_is_priced_by_the_policys_fit_of_its_samples() -> None:
    # TTLScheduler._finish_program_request prices a finished request's cached prefix with
    # TTLPolicy.miss_cost_s(prefix tokens) — the configured line until min_prefill_samples
    # samples of three sizes are in, then the least-squares a + b·n + c·n(n + 2·cached)
    # through the samples, priced at a·⌈P / chunk⌉ + b·P + c·P² (the fixed term once per step
    # of the engine's chunked prefill: TTLScheduler passes vLLM's token budget as
    # prefill_chunk_tokens) — and hands it to ProgramScheduler.finish as cache_miss_cost_s.
    # The simulator's own prefill time is not used.  Checked at each finish against a fit
    # computed here.
    hw = hw_blocks(2000)
    _, _, log = run(hw, [(0.0, _returning_program(12))])
    seen: list[tuple[int, float, int]] = []
    checked = fitted = longest = 0
    for name, (args, kwargs) in log:
        if name == "observe_prefill":
            seen.append(args)
            continue
        prefix_tokens = args[2] * BLOCK  # blocks_held
        steps = math.ceil(prefix_tokens / CFG.token_budget)
        longest = max(longest, prefix_tokens)
        miss_s = kwargs["cache_miss_cost_s"]
        if len(seen) < DEFAULTS.min_prefill_samples:
            expected = (
                DEFAULTS.prefill_base_s * steps
                + DEFAULTS.prefill_s_per_token * prefix_tokens
                + DEFAULTS.prefill_s_per_token2 * prefix_tokens**2
            )
            assert miss_s != pytest.approx(hw.prefill_s(prefix_tokens, CFG.token_budget))
        else:
            n, y, cached = np.array(seen, dtype=float).T
            design = np.column_stack([np.ones_like(n), n, n * (n + 2 * cached)])
            a, b, c = np.linalg.lstsq(design, y, rcond=None)[0]
            assert min(a, b, c) >= 0  # (else the library's fit drops a term: not this case)
            expected = a * steps + b * prefix_tokens + c * prefix_tokens**2
            fitted += 1
        assert miss_s == pytest.approx(expected, rel=1e-6, abs=1e-9)
        checked += 1
    assert checked == 12 and fitted >= 2  # (a last turn is priced too; no pin follows)
    assert longest > CFG.token_budget  # (prefixes of several chunks were priced)


def test_with_a_cpu_tier_a_miss_costs_the_reload_of_what_the_tier_can_hold() -> None:
    # The adapter passes the tokens vLLM's offload tier holds as offloaded_tokens, and the
    # library prices min(prefill(all), reload(offloaded) + prefill(rest)) at the config's
    # offload_bandwidth_bytes_per_s (CacheMissModel.miss_cost_s).  The simulated tier holds
    # a lost prefix up to its size, reloaded over the host link (Hardware.transfer_s).
    # Before any sample, prefill is the configured line, its fixed term once per chunk.
    def prefill(n: int) -> float:
        steps = math.ceil(n / CFG.token_budget)
        return DEFAULTS.prefill_base_s * steps + DEFAULTS.prefill_s_per_token * n

    for tier_blocks, tokens in ((100_000, 50_000), (10, 50_000), (10, 100)):
        hw = hw_blocks(1000, cpu_blocks=tier_blocks)
        plugin = ttl("ttlpolicy-offload:adapter")
        Engine(hw, plugin, CFG)
        held = min(tokens, tier_blocks * BLOCK)
        rest = prefill(tokens - held) if tokens > held else 0.0
        expected = min(prefill(tokens), hw.transfer_s(held) + rest)
        assert plugin.miss_cost_s(tokens) == pytest.approx(expected, rel=1e-12)
    # and a tier-less ttlpolicy prices the full prefill
    plugin = ttl("ttlpolicy:adapter")
    Engine(hw_blocks(1000), plugin, CFG)
    assert plugin.miss_cost_s(50_000) == pytest.approx(prefill(50_000), rel=1e-12)


def test_the_default_prices_as_the_adapter_and_adapter_names_the_default() -> None:
    hw = hw_blocks(2000)
    logs = [run(hw, [(0.0, _returning_program(12))], policy=p)[2] for p in POLICIES]
    assert logs[0] == logs[1] and samples(logs[0])  # (the fit is fed)
    assert ttl("ttlpolicy-offload").adapter and not ttl("ttlpolicy-offload:exact").adapter
    with pytest.raises(ValueError, match="two pricings"):
        ttl("ttlpolicy:adapter+exact")


POLICIES = ("ttlpolicy", "ttlpolicy:adapter")


def test_exact_prices_a_miss_at_the_simulators_prefill_and_fits_nothing() -> None:
    # ``:exact`` keeps the oracle: Hardware.prefill_s of the lost prefix (with a CPU tier,
    # the cheaper of that and its transfer), and the policy's fit is never fed.
    hw = hw_blocks(2000, cpu_blocks=100_000)
    _, _, log = run(hw, [(0.0, _returning_program(12))], policy="ttlpolicy:exact")
    assert samples(log) == []
    finishes = [(args, kwargs) for name, (args, kwargs) in log if name == "finish"]
    assert len(finishes) == 12
    for args, kwargs in finishes:
        exact = hw.prefill_s(args[2] * BLOCK, CFG.token_budget)
        assert kwargs["cache_miss_cost_s"] == pytest.approx(exact, rel=1e-12)
    plugin = ttl("ttlpolicy-offload:exact")
    Engine(hw, plugin, CFG)
    assert plugin.miss_cost_s(50_000) == pytest.approx(
        min(hw.prefill_s(50_000, CFG.token_budget), hw.transfer_s(50_000)), rel=1e-12
    )


def test_the_pricing_words_join_the_variant_names() -> None:
    # (name, adapter rules, admission, pin budget fraction)
    for name, adapter, admission, pins in (
        ("ttlpolicy:adapter", True, True, 0.5),
        ("ttlpolicy-offload:adapter+admission", True, False, 0.5),
        ("ttlpolicy:adapter+pins", True, True, 0.0),
        ("ttlpolicy:pins", True, True, 0.0),
        ("ttlpolicy:exact", False, True, 0.5),
        ("ttlpolicy-offload:admission+exact", False, False, 0.5),
        ("ttlpolicy:exact+pins", False, True, 0.0),
    ):
        plugin = ttl(name)
        Engine(hw_blocks(100), plugin, CFG)
        got = (plugin.name, plugin.adapter, plugin.ttl_policy.config.admission)
        assert got == (name, adapter, admission)
        assert plugin.pin_budget_fraction == pins
