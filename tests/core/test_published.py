"""The published CacheTTL model (``PolicyConfig.published()``) on both backends, tested
against the paper's own statements (Continuum, arXiv 2511.02230, §4): Eq. 2's τ* with the
memory share cancelled, the K = 100 cold start with an Exp(1 s) prior (τ = ln B), fixed
program lengths ⇒ η = 1, memoryless (geometric) lengths ⇒ η ≈ 0, η unclipped."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig

K = 100  # the paper's cold-start history size


def published(**kw) -> PolicyConfig:
    return PolicyConfig.published(**kw)


def test_preset_round_trips_and_keeps_defaults_elsewhere() -> None:
    cfg = published()
    assert PolicyConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert json.loads(cfg.model_dump_json())["pin_handover"] == "schedule"
    # The library's own defaults are untouched by the new switches.
    d = PolicyConfig()
    assert (d.scale_cost_by_memory, d.prior_mean_from_history, d.clip_eta) == (True, True, True)
    assert (d.cold_start_eta, d.pin_handover) == (None, "arrival")
    assert published(kv_bytes_per_token=7).kv_bytes_per_token == 7
    with pytest.raises(ValueError, match="pin_handover"):
        PolicyConfig(pin_handover="later")
    with pytest.raises(ValueError, match="cold_start_eta"):
        PolicyConfig(cold_start_eta=float("nan"))


@given(st.floats(0.0, 1e4))
def test_cold_start_exp1_prior_gives_ln_b(impl, benefit) -> None:
    """Exp(1 s) durations, c = 1: P(τ)·B − τ = (1 − e^−τ)·B − τ peaks at τ = ln B (B > 1)."""
    policy = impl.TTLPolicy(published())
    d = policy.decide(tool="ls", request_blocks=5, mean_active_blocks=50.0,
                      cache_miss_cost_s=benefit)  # fmt: skip
    if benefit > 1.0:
        assert d.ttl_s == pytest.approx(math.log(benefit), rel=1e-12, abs=1e-12)
        assert d.source == "exponential_prior"
        assert d.p_return == pytest.approx(1.0 - 1.0 / benefit, rel=1e-9, abs=1e-12)
    else:
        assert d.ttl_s == 0.0
    assert d.cost_per_s == 1.0


def test_cold_start_ln_b_is_the_numeric_optimum(impl) -> None:
    grid = np.linspace(0.0, 20.0, 200_001)
    for benefit in (1.5, 3.0, 40.0, 1000.0):
        d = impl.TTLPolicy(published()).decide(request_blocks=1, cache_miss_cost_s=benefit)
        best = grid[int(np.argmax((1.0 - np.exp(-grid)) * benefit - grid))]
        assert d.ttl_s == pytest.approx(best, abs=2 * grid[1])


def test_cold_start_benefit_uses_eta_one_and_t(impl) -> None:
    """B = T + PrefillOrReload during cold start, whatever η the estimator holds."""
    policy = impl.TTLPolicy(published(eta_min_programs=0))
    for n in (1, 1, 1, 1, 30):  # mixed lengths: the estimator's η is far from 1
        policy.observe_program(n)
    assert policy.eta < 0.9
    policy.observe_queueing_delay(3.0)
    policy.observe_queueing_delay(5.0)  # T = 4
    d = policy.decide(tool="x", request_blocks=3, cache_miss_cost_s=2.0)
    assert d.benefit_s == 6.0
    assert d.ttl_s == pytest.approx(math.log(6.0), rel=1e-12)
    # The prior mean does not move with the history (the library's own default does).
    for _ in range(K):
        policy.observe_tool("x", 50.0)
    d = policy.decide(tool="x", request_blocks=3, cache_miss_cost_s=2.0)
    assert d.ttl_s == pytest.approx(math.log(6.0), rel=1e-12)


def test_k_100_thresholds(impl) -> None:
    """≤ 100 durations in all: prior; then the global CDF while the tool has ≤ 100; then the
    tool's own CDF."""
    policy = impl.TTLPolicy(published())
    for i in range(K):
        policy.observe_tool("other", 0.5 + i * 1e-3)
    assert policy.decide(tool="bash", cache_miss_cost_s=5.0).source == "exponential_prior"
    policy.observe_tool("bash", 0.1)
    assert policy.decide(tool="bash", cache_miss_cost_s=5.0).source == "global_cdf"
    for _ in range(K - 1):
        policy.observe_tool("bash", 0.1)
    assert policy.tool_count("bash") == K
    assert policy.decide(tool="bash", cache_miss_cost_s=5.0).source == "global_cdf"
    policy.observe_tool("bash", 0.1)
    d = policy.decide(tool="bash", cache_miss_cost_s=5.0)
    # 101 samples of 0.1 s: pinning 0.1 s catches all of them.
    assert (d.source, d.ttl_s, d.p_return) == ("tool_cdf", 0.1, 1.0)


@given(st.integers(1, 10_000), st.floats(1.0, 1e5), st.floats(0.5, 50.0))
def test_memory_share_cancels(impl, blocks, mean_active, benefit) -> None:
    """Eq. 2: the request's size changes nothing but through its miss cost."""
    policy = impl.TTLPolicy(published())
    rng = random.Random(7)
    for _ in range(2 * K):
        policy.observe_tool("t", rng.expovariate(0.5))
    a = policy.decide(tool="t", request_blocks=blocks, mean_active_blocks=mean_active,
                      cache_miss_cost_s=benefit)  # fmt: skip
    b = policy.decide(tool="t", request_blocks=1, mean_active_blocks=1.0,
                      cache_miss_cost_s=benefit)  # fmt: skip
    assert (a.ttl_s, a.p_return, a.cost_per_s) == (b.ttl_s, b.p_return, 1.0)


def test_candidates_are_every_duration_without_a_cap(impl) -> None:
    """τ* is 0 or a recorded duration, however long: an hour-long tool whose every call is
    worth more than an hour is pinned for the hour."""
    policy = impl.TTLPolicy(published())
    for _ in range(K + 1):
        policy.observe_tool("train", 3600.0)
    d = policy.decide(tool="train", cache_miss_cost_s=5000.0)
    assert (d.ttl_s, d.p_return, d.source) == (3600.0, 1.0, "tool_cdf")
    d = policy.decide(tool="train", cache_miss_cost_s=3000.0)
    assert d.ttl_s == 0.0


def test_fixed_length_programs_give_eta_one(impl) -> None:
    est = impl.EtaEstimator(window=1000, min_programs=2, clip=False)
    for _ in range(50):
        est.observe(12)
    assert est.eta == pytest.approx(1.0, abs=1e-12)


def test_geometric_lengths_give_eta_near_zero(impl) -> None:
    """Memoryless lengths: turns done say nothing about turns left."""
    rng = np.random.default_rng(0)
    est = impl.EtaEstimator(window=3000, min_programs=2, clip=False)
    for n in rng.geometric(0.1, size=3000):
        est.observe(int(n))
    assert abs(est.eta) < 0.05


@pytest.mark.parametrize("lengths", [[1] * 200 + [30] * 3, [2, 3, 50, 1, 1, 1, 80], [5, 9, 14]])
def test_eta_is_unclipped_minus_corr(impl, lengths) -> None:
    k = [i for n in lengths for i in range(1, n + 1)]
    r = [n - i for n in lengths for i in range(1, n + 1)]
    expected = -float(np.corrcoef(k, r)[0, 1])
    est = impl.EtaEstimator(window=1000, min_programs=0, clip=False)
    for n in lengths:
        est.observe(n)
    assert est.eta == pytest.approx(expected, rel=1e-9)
    clipped = impl.EtaEstimator(window=1000, min_programs=0)
    for n in lengths:
        clipped.observe(n)
    assert clipped.eta == pytest.approx(min(1.0, max(0.0, expected)), rel=1e-9, abs=1e-12)


def test_negative_eta_can_remove_the_benefit(impl) -> None:
    lengths = [1] * 200 + [30] * 3  # between programs, k and N − k grow together
    policy = impl.TTLPolicy(published(eta_min_programs=0))
    for n in lengths:
        policy.observe_program(n)
    assert policy.eta < 0.0
    for _ in range(K + 1):
        policy.observe_tool("t", 0.5)
    policy.observe_queueing_delay(100.0)
    d = policy.decide(tool="t", cache_miss_cost_s=1.0)
    assert d.benefit_s == pytest.approx(1.0 + policy.eta * 100.0)
    assert d.benefit_s < 0.0 and (d.ttl_s, d.source) == (0.0, "no_benefit")
