"""η, T and the cache-miss model on both backends, against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig


def eta_by_pairs(turns: list[int]) -> float:
    """−corr(k, N−k) over the explicit pairs, with numpy, clamped to [0, 1]."""
    k = np.concatenate([np.arange(1, n + 1) for n in turns]).astype(float)
    r = np.concatenate([n - np.arange(1, n + 1) for n in turns]).astype(float)
    if k.std() == 0 or r.std() == 0:
        return 1.0
    return float(min(1.0, max(0.0, -np.corrcoef(k, r)[0, 1])))


def test_eta_is_one_for_fixed_length_programs(impl) -> None:
    e = impl.EtaEstimator(window=64, min_programs=8)
    for _ in range(64):
        e.observe(17)
    assert e.eta == pytest.approx(1.0, abs=1e-12)


def test_eta_is_near_zero_for_geometric_programs(impl) -> None:
    # Memoryless lengths: the turns left do not depend on the turns done.
    rng = np.random.default_rng(2511)
    e = impl.EtaEstimator(window=4096, min_programs=8)
    for n in rng.geometric(0.1, size=4096):
        e.observe(int(n))
    assert e.eta < 0.05


def test_eta_is_one_until_enough_programs(impl) -> None:
    e = impl.EtaEstimator(window=16, min_programs=5)
    for n in (1, 40, 3, 90):
        e.observe(n)
        assert e.eta == 1.0
    e.observe(7)
    assert e.eta == pytest.approx(eta_by_pairs([1, 40, 3, 90, 7]), abs=1e-12)
    assert e.eta < 1.0
    assert e.count() == 5


@given(st.integers(1, 8), st.lists(st.integers(1, 200), min_size=1, max_size=30))
def test_eta_is_the_windowed_correlation(impl, window, turns) -> None:
    e = impl.EtaEstimator(window=window, min_programs=0)
    for n in turns:
        e.observe(n)
    assert e.count() == min(window, len(turns))
    assert e.eta == pytest.approx(eta_by_pairs(turns[-window:]), abs=1e-9)
    assert 0.0 <= e.eta <= 1.0


def test_eta_handles_the_largest_programs(impl) -> None:
    e = impl.EtaEstimator(window=512, min_programs=0)
    for i in range(512):
        e.observe(1_000_000 if i % 2 else 1)
    assert 0.0 <= e.eta <= 1.0


@given(st.integers(1, 6), st.lists(st.floats(0.0, 1e6), min_size=1, max_size=30))
def test_out_of_order_cost_is_the_windowed_mean(impl, window, delays) -> None:
    t = impl.OutOfOrderCost(window=window)
    assert t.mean_s == 0.0
    for d in delays:
        t.observe(d)
    kept = delays[-window:]
    assert t.mean_s == pytest.approx(sum(kept) / len(kept), rel=1e-12)
    assert t.count() == len(kept)


# -- cache-miss model ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, c", [(0.02, 3e-5, 2e-9), (0.0, 1e-4, 0.0), (0.5, 0.0, 1e-8), (0.005, 2e-4, 5e-10)]
)
def test_fit_recovers_known_quadratic_coefficients(impl, a, b, c) -> None:
    m = impl.CacheMissModel(window=64, min_samples=8)
    for n in range(256, 256 * 17, 256):
        m.observe_prefill(n, a + b * n + c * n * n)
    assert m.fitted
    fa, fb, fc = m.coefficients
    assert fa == pytest.approx(a, abs=1e-9)
    assert fb == pytest.approx(b, abs=1e-12)
    assert fc == pytest.approx(c, abs=1e-15)
    assert m.prefill_s(10_000) == pytest.approx(a + b * 1e4 + c * 1e8, rel=1e-6)


def test_fit_recovers_coefficients_from_noisy_measurements(impl) -> None:
    rng = np.random.default_rng(7)
    a, b, c = 0.03, 5e-5, 1e-9
    m = impl.CacheMissModel(window=256, min_samples=8)
    for n in rng.integers(100, 20_000, size=256):
        n = int(n)
        m.observe_prefill(n, (a + b * n + c * n * n) * (1 + rng.normal(0, 0.01)))
    _fa, fb, fc = m.coefficients
    assert fb == pytest.approx(b, rel=0.2)
    assert fc == pytest.approx(c, rel=0.2)
    assert m.prefill_s(10_000) == pytest.approx(a + b * 1e4 + c * 1e8, rel=0.02)


def test_defaults_until_fitted(impl) -> None:
    m = impl.CacheMissModel(prefill_base_s=0.1, prefill_s_per_token=1e-3, min_samples=4)
    assert not m.fitted
    assert m.coefficients == m.default_coeffs == (0.1, 1e-3, 0.0)
    assert m.prefill_s(1000) == pytest.approx(0.1 + 1.0)
    assert m.prefill_s(0) == 0.0
    for n in (100, 200, 300):
        m.observe_prefill(n, 1.0)
    assert not m.fitted  # fewer than min_samples


def test_fewer_than_three_token_counts_do_not_fit(impl) -> None:
    m = impl.CacheMissModel(min_samples=4)
    for i in range(20):
        m.observe_prefill(100 + i % 2, 1.0 + 1e-3 * i)
    assert not m.fitted
    m.observe_prefill(5000, 2.0)
    assert m.fitted


def test_reload_and_miss_cost_take_the_cheaper_path(impl) -> None:
    m = impl.CacheMissModel(
        prefill_base_s=0.0,
        prefill_s_per_token=1e-3,
        kv_bytes_per_token=1000,
        offload_bandwidth_bytes_per_s=1e7,
    )
    assert m.reload_s(1000) == pytest.approx(0.1)
    assert m.prefill_s(1000) == pytest.approx(1.0)
    # All 1000 offloaded: reload 0.1 s beats recompute 1 s.
    assert m.miss_cost_s(1000, 1000) == pytest.approx(0.1)
    # 400 offloaded: reload 0.04 + recompute 600 (0.6) = 0.64.
    assert m.miss_cost_s(1000, 400) == pytest.approx(0.64)
    assert m.miss_cost_s(1000) == pytest.approx(1.0)
    slow = impl.CacheMissModel(
        prefill_base_s=0.0,
        prefill_s_per_token=1e-3,
        kv_bytes_per_token=1000,
        offload_bandwidth_bytes_per_s=1e3,
    )
    assert slow.miss_cost_s(1000, 1000) == pytest.approx(1.0)  # reload 1000 s: recompute
    assert impl.CacheMissModel().reload_s(1000) is None


def test_reload_bytes_are_exact_beyond_2_63(impl) -> None:
    m = impl.CacheMissModel(kv_bytes_per_token=1 << 40, offload_bandwidth_bytes_per_s=3.0)
    assert m.reload_s(1 << 40) == float((1 << 40) * (1 << 40)) / 3.0


def test_predictions_are_never_negative(impl) -> None:
    """A falling curve (measurement noise: time cannot fall with work) is priced by the best
    fit with no negative coefficient — here its mean — never below zero, never falling."""
    m = impl.CacheMissModel(min_samples=3, window=3)
    for n, s in ((1000, 3.0), (2000, 2.0), (3000, 0.0)):  # a falling curve
        m.observe_prefill(n, s)
    assert m.fitted
    assert m.coefficients == pytest.approx((5.0 / 3.0, 0.0, 0.0))
    assert m.prefill_s(10_000) == pytest.approx(5.0 / 3.0)
    assert all(m.prefill_s(n) >= 0.0 for n in range(0, 50_000, 997))


def test_constructor_settings_are_visible(impl) -> None:
    m = impl.CacheMissModel(
        kv_bytes_per_token=7, offload_bandwidth_bytes_per_s=5.0, window=9, min_samples=4
    )
    assert (m.kv_bytes_per_token, m.offload_bandwidth_bytes_per_s) == (7, 5.0)
    assert (m.window, m.min_samples) == (9, 4)
    e = impl.EtaEstimator()
    assert (e.window, e.min_programs, e.eta, e.count()) == (256, 8, 1.0, 0)
    t = impl.OutOfOrderCost()
    assert (t.window, t.mean_s, t.count()) == (256, 0.0, 0)
    assert math.isfinite(impl.CacheMissModel().prefill_s(1 << 40))


def test_a_concave_fit_never_prices_a_longer_prefix_lower(impl) -> None:
    """The prefills an engine measures are first chunks of at most one token budget, and the
    steps that carry them often carry decodes too, so the short ones look slow: a free
    quadratic through such points is concave and prices a 8k-token prefix at 0 s. The fit
    keeps every coefficient >= 0: a longer prefix never costs less to rebuild."""
    points = [(256, 0.040), (512, 0.070), (1024, 0.120), (1536, 0.160), (2048, 0.190)]
    free = np.polyfit([n for n, _ in points], [s for _, s in points], 2)
    assert free[0] < 0 and np.polyval(free, 8000) < 0  # what an unconstrained fit says
    m = impl.CacheMissModel(window=64, min_samples=4)
    for n, s in points * 2:
        m.observe_prefill(n, s)
    assert m.fitted and min(m.coefficients) >= 0.0
    prices = [m.prefill_s(n) for n in range(0, 200_001, 1000)]
    assert prices == sorted(prices)
    # the measured range is still described (least squares over the points kept)
    assert max(abs(m.prefill_s(n) - s) / s for n, s in points) < 0.2
    assert m.prefill_s(100_000) > 20 * m.prefill_s(2048)


def test_chunks_after_cached_prefixes_price_a_long_prefix_whole(impl) -> None:
    """What an engine measures: first chunks of at most one token budget (2048), most of them
    after a long cached prefix, each step's time including the chunk's attention over that
    prefix. Told the cached tokens, the fit prices a 100k-token prefix as its chunked
    prefill costs (the attention of its chunks sums to c·100k²); not told, it fits the chunks
    as if they started from nothing and misprices the prefix (here several times over; on
    the agent sweep, at a median half of its prefill time)."""
    a, b, c = 0.02, 5e-5, 2e-10  # a true engine: chunk of n after k cached = a + b·n + c·n(n+2k)
    rng = np.random.default_rng(3)
    samples = []
    for _ in range(200):
        n = int(rng.integers(200, 2049))
        k = int(rng.integers(0, 120_000))
        samples.append((n, k, a + b * n + c * n * (n + 2 * k)))
    told, blind = impl.CacheMissModel(min_samples=8), impl.CacheMissModel(min_samples=8)
    for n, k, s in samples:
        told.observe_prefill(n, s, cached_tokens=k)
        blind.observe_prefill(n, s)
    whole = b * 100_000 + c * 100_000**2  # the prefix's chunks: attention c·P², one b·P
    assert told.prefill_s(100_000) == pytest.approx(a + whole, rel=1e-6)
    assert abs(blind.prefill_s(100_000) - (a + whole)) > 0.2 * (a + whole)
    # without cached tokens the model is the quadratic of chunks from nothing, as before
    fresh = impl.CacheMissModel(min_samples=8)
    for n in range(256, 256 * 17, 256):
        fresh.observe_prefill(n, a + b * n + c * n * n, cached_tokens=0)
    assert fresh.prefill_s(10_000) == pytest.approx(a + b * 1e4 + c * 1e8, rel=1e-6)


def test_a_chunked_engine_pays_the_step_cost_once_per_chunk(impl) -> None:
    """An engine that prefills in chunks of 2048 tokens rebuilds a 100k-token prefix in 49
    steps, each with the step's fixed cost a. The samples are single steps, so the fit learns
    a once; told the chunk size, the model charges it per chunk and prices the prefix as
    those steps cost; not told, it charges a once and prices it lower by 48·a."""
    a, b, c, chunk = 0.05, 5e-5, 2e-10, 2048
    rng = np.random.default_rng(5)
    samples = [
        (int(rng.integers(200, chunk + 1)), int(rng.integers(0, 120_000))) for _ in range(200)
    ]
    chunked = impl.CacheMissModel(min_samples=8, prefill_chunk_tokens=chunk)
    single = impl.CacheMissModel(min_samples=8)
    for n, k in samples:
        seconds = a + b * n + c * n * (n + 2 * k)
        chunked.observe_prefill(n, seconds, cached_tokens=k)
        single.observe_prefill(n, seconds, cached_tokens=k)
    prefix = 100_000
    steps, done = 0.0, 0
    while done < prefix:  # the engine's steps, chunk by chunk
        n = min(chunk, prefix - done)
        steps += a + b * n + c * n * (n + 2 * done)
        done += n
    assert chunked.prefill_chunk_tokens == chunk and single.prefill_chunk_tokens is None
    assert chunked.prefill_s(prefix) == pytest.approx(steps, rel=1e-6)
    assert single.prefill_s(prefix) == pytest.approx(steps - 48 * a, rel=1e-6)
    # one chunk or less: one step either way
    assert chunked.prefill_s(chunk) == pytest.approx(single.prefill_s(chunk), rel=1e-12)
    assert chunked.prefill_s(chunk + 1) > single.prefill_s(chunk + 1) + 0.9 * a
    # the policy builds its model from the config's field
    cfg = PolicyConfig(prefill_chunk_tokens=chunk, min_prefill_samples=8)
    policy = impl.TTLPolicy(cfg)
    for n, k in samples:
        policy.observe_prefill(n, a + b * n + c * n * (n + 2 * k), k)
    assert policy.miss_cost_s(prefix) == pytest.approx(chunked.prefill_s(prefix), rel=1e-12)
