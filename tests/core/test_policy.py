"""TTLPolicy.decide, PinDecision and PolicyConfig on both backends."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.reference import solver as ref_solver

SOURCES = {"tool_cdf", "global_cdf", "exponential_prior", "capped", "no_benefit"}


def test_cold_start_matches_a_numeric_argmax_of_the_exponential_model(impl) -> None:
    """With no samples, P(τ) = 1 − exp(−τ/μ): the closed form must be the true optimum."""
    mu, max_ttl = 10.0, 300.0
    policy = impl.TTLPolicy(PolicyConfig(prior_mean_s=mu, max_ttl_s=max_ttl))
    grid = np.linspace(0.0, max_ttl, 300_001)
    p = 1.0 - np.exp(-grid / mu)
    for benefit, blocks in [(5.0, 10), (20.0, 10), (2.0, 50), (0.5, 1), (100.0, 1), (1.0, 1000)]:
        d = policy.decide(
            tool="t", request_blocks=blocks, mean_active_blocks=100.0, cache_miss_cost_s=benefit
        )
        cost = blocks / 100.0
        objective = p * benefit - cost * grid
        best = grid[int(np.argmax(objective))]
        assert d.ttl_s == pytest.approx(best, abs=2 * grid[1]), (benefit, blocks)
        assert d.p_return == pytest.approx(1.0 - math.exp(-d.ttl_s / mu), rel=1e-12)
        assert d.source in {"exponential_prior", "capped"}
        assert (d.benefit_s, d.cost_per_s) == (benefit, cost)


@given(st.floats(0.01, 1e3), st.floats(1e-3, 10.0), st.floats(0.1, 100.0))
def test_exponential_prior_closed_form(impl, benefit, cost, mu) -> None:
    policy = impl.TTLPolicy(PolicyConfig(prior_mean_s=mu, max_ttl_s=1e9))
    d = policy.decide(request_blocks=1, mean_active_blocks=1 / cost, cache_miss_cost_s=benefit)
    c = 1 / (1 / cost)
    expected = mu * math.log(benefit / (c * mu)) if benefit > c * mu else 0.0
    assert d.ttl_s == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert d.source == "exponential_prior"


def test_free_holding_is_capped(impl) -> None:
    d = impl.TTLPolicy(PolicyConfig(max_ttl_s=42.0)).decide(request_blocks=0, cache_miss_cost_s=1.0)
    assert (d.ttl_s, d.source) == (42.0, "capped")
    d = impl.TTLPolicy(PolicyConfig(max_ttl_s=5.0, prior_mean_s=10.0)).decide(
        request_blocks=1, mean_active_blocks=1000.0, cache_miss_cost_s=100.0
    )
    assert (d.ttl_s, d.source) == (5.0, "capped")


def test_a_subnormal_prior_mean_caps_the_ttl(impl) -> None:
    """μ from the history's mean can be the smallest subnormal: cost · μ underflows to 0, the
    ratio is inf and the TTL capped (the reference raised ZeroDivisionError; a differential
    test of tenants' cold starts found it)."""
    policy = impl.TTLPolicy(PolicyConfig(min_total_samples=2, max_ttl_s=7.0))
    policy.observe_tool("a", 5e-324)
    d = policy.decide(tool="a", request_blocks=1, mean_active_blocks=61.0, cache_miss_cost_s=5.0,
                      tenant="t1")  # fmt: skip
    assert (d.ttl_s, d.source) == (7.0, "capped")


def test_prior_mean_comes_from_the_global_window_once_samples_exist(impl) -> None:
    policy = impl.TTLPolicy(PolicyConfig(min_total_samples=100, prior_mean_s=10.0))
    for x in (1.0, 2.0, 3.0):
        policy.observe_tool("t", x)
    d = policy.decide(tool="t", request_blocks=1, mean_active_blocks=10.0, cache_miss_cost_s=5.0)
    mu = 2.0
    assert d.source == "exponential_prior"
    assert d.ttl_s == pytest.approx(mu * math.log(5.0 / (0.1 * mu)), rel=1e-12)


def test_source_follows_the_sample_counts(impl) -> None:
    cfg = PolicyConfig(min_tool_samples=4, min_total_samples=10)
    policy = impl.TTLPolicy(cfg)

    def source(tool: str | None) -> str:
        return policy.decide(
            tool=tool, request_blocks=1, mean_active_blocks=100.0, cache_miss_cost_s=3.0
        ).source

    assert source("a") == "exponential_prior"
    for i in range(6):
        policy.observe_tool("a", 1.0 + i)
    assert source("a") == "tool_cdf"
    assert source("b") == "exponential_prior"  # 6 < min_total_samples
    for i in range(4):
        policy.observe_tool("b", 2.0 + i)
    assert source("b") == "tool_cdf"
    policy.observe_tool("c", 1.0)
    assert source("c") == "global_cdf"
    assert source(None) == "global_cdf"
    assert source("never-seen") == "global_cdf"


def test_decision_is_the_solver_on_the_tools_window(impl) -> None:
    policy = impl.TTLPolicy(PolicyConfig(window=64, min_tool_samples=8, min_total_samples=8))
    xs = [0.5 * ((i * 37) % 23) for i in range(100)]
    for x in xs:
        policy.observe_tool("grep", x)
    d = policy.decide(tool="grep", request_blocks=3, mean_active_blocks=40.0, cache_miss_cost_s=2.5)
    window = xs[-64:]
    tau, _ = ref_solver.solve_ttl(window, 2.5, 3 / 40.0, 300.0)
    assert d.ttl_s == tau
    assert d.p_return == sum(1 for x in window if x <= tau) / 64
    assert d.source == "tool_cdf"
    assert d.pin == (tau > 0.0)


def test_benefit_is_miss_cost_plus_eta_times_t(impl) -> None:
    policy = impl.TTLPolicy(PolicyConfig(eta_min_programs=0))
    for n in (3, 3, 3):
        policy.observe_program(n)
    policy.observe_queueing_delay(4.0)
    policy.observe_queueing_delay(2.0)
    assert (policy.eta, policy.out_of_order_cost_s) == (pytest.approx(1.0), 3.0)
    d = policy.decide(request_blocks=2, mean_active_blocks=8.0, cache_miss_cost_s=0.5)
    assert d.benefit_s == pytest.approx(0.5 + policy.eta * 3.0)
    assert d.cost_per_s == 0.25


def test_miss_cost_model_prices_prefix_tokens(impl) -> None:
    cfg = PolicyConfig(
        prefill_base_s=0.0,
        prefill_s_per_token=1e-3,
        kv_bytes_per_token=1000,
        offload_bandwidth_bytes_per_s=1e7,
    )
    policy = impl.TTLPolicy(cfg)
    d = policy.decide(request_blocks=1, mean_active_blocks=10.0, prefix_tokens=2000)
    assert d.benefit_s == pytest.approx(2.0)
    d = policy.decide(
        request_blocks=1, mean_active_blocks=10.0, prefix_tokens=2000, offloaded_tokens=2000
    )
    assert d.benefit_s == pytest.approx(0.2)
    assert policy.miss_cost_s(2000, 2000) == pytest.approx(0.2)
    for n, s in ((1000, 0.5), (2000, 1.0), (3000, 1.5), (4000, 2.0)) * 2:
        policy.observe_prefill(n, s)
    assert policy.miss_cost_s(2000) == pytest.approx(1.0)


def test_no_benefit_means_no_pin(impl) -> None:
    policy = impl.TTLPolicy()
    d = policy.decide(tool="x", request_blocks=5, mean_active_blocks=10.0, cache_miss_cost_s=0.0)
    assert (d.ttl_s, d.p_return, d.source, d.pin) == (0.0, 0.0, "no_benefit", False)
    d = policy.decide(tool="x", request_blocks=5, mean_active_blocks=10.0, prefix_tokens=0)
    assert d.source == "no_benefit"


def test_tool_count_and_config(impl) -> None:
    cfg = PolicyConfig(window=16)
    policy = impl.TTLPolicy(cfg)
    assert policy.config is cfg
    assert impl.TTLPolicy().config == PolicyConfig()
    for _ in range(20):
        policy.observe_tool("a", 1.0)
    assert policy.tool_count("a") == 16
    assert policy.tool_count(None) == 16
    assert policy.tool_count("b") == 0


# -- PinDecision --------------------------------------------------------------------------------


def test_pin_decision_value_semantics(impl) -> None:
    a = impl.PinDecision(1.5, 2.0, 0.1, 0.75, "tool_cdf")
    b = impl.PinDecision(1.5, 2.0, 0.1, 0.75, "tool_cdf")
    c = impl.PinDecision(0.0, 2.0, 0.1, 0.0, "no_benefit")
    assert a == b and hash(a) == hash(b) and a != c
    assert a.pin and not c.pin
    assert repr(a) == (
        "PinDecision(ttl_s=1.5, benefit_s=2.0, cost_per_s=0.1, p_return=0.75, source='tool_cdf')"
    )
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.ttl_s = 3.0
    assert a != (1.5, 2.0, 0.1, 0.75, "tool_cdf")


def test_decisions_compare_equal_across_calls(impl) -> None:
    policy = impl.TTLPolicy()
    kw = dict(tool="t", request_blocks=1, mean_active_blocks=10.0, cache_miss_cost_s=1.0)
    first, second = policy.decide(**kw), policy.decide(**kw)
    assert first == second
    assert first.source in SOURCES


def test_native_pin_decision_refuses_unknown_sources(backends) -> None:
    _, native = backends
    with pytest.raises(ValueError, match="source"):
        native.PinDecision(1.0, 1.0, 1.0, 1.0, "bogus")


# -- PolicyConfig -------------------------------------------------------------------------------


def test_config_json_round_trip() -> None:
    cfg = PolicyConfig(window=64, max_ttl_s=12.5, offload_bandwidth_bytes_per_s=2e10)
    again = PolicyConfig.model_validate_json(cfg.model_dump_json())
    assert again == cfg
    assert PolicyConfig.model_validate_json(PolicyConfig().model_dump_json()) == PolicyConfig()


@pytest.mark.parametrize(
    "field, value",
    [
        ("window", 0),
        ("window", (1 << 20) + 1),
        ("max_tools", 0),
        ("min_tool_samples", -1),
        ("prior_mean_s", 0.0),
        ("max_ttl_s", -1.0),
        ("max_ttl_s", float("nan")),
        ("max_ttl_s", float("inf")),
        ("min_prefill_samples", 2),
        ("kv_bytes_per_token", -1),
        ("offload_bandwidth_bytes_per_s", 0.0),
        ("prefill_chunk_tokens", 0),
        ("prefill_chunk_tokens", (1 << 40) + 1),
        ("unknown_knob", 1),  # (text for a number is a TypeError: test_hostile_input.py)
    ],
)
def test_config_refuses_bad_values(field, value) -> None:
    with pytest.raises(pydantic.ValidationError, match=field):
        PolicyConfig(**{field: value})


def test_config_refuses_an_unreachable_tool_minimum() -> None:
    with pytest.raises(pydantic.ValidationError, match="min_tool_samples"):
        PolicyConfig(window=4, min_tool_samples=5)


def test_config_is_frozen() -> None:
    with pytest.raises(pydantic.ValidationError):
        PolicyConfig().window = 3  # type: ignore[misc]


@pytest.mark.parametrize("bad", [{"window": 16}, "cfg", 3])
def test_policy_requires_a_policy_config(impl, bad) -> None:
    with pytest.raises(TypeError, match="PolicyConfig"):
        impl.TTLPolicy(bad)
