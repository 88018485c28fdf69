"""solve_ttl: the exact argmax of P(τ)·benefit − cost·τ, on both backends."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

durations = st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False)
# Coarse values make ties between samples and between objective values common.
coarse = st.integers(0, 40).map(lambda i: i / 4)
samples_st = st.one_of(st.lists(durations, max_size=60), st.lists(coarse, max_size=60))
benefit_st = st.one_of(st.floats(0.0, 1e4), coarse)
cost_st = st.one_of(st.floats(0.0, 1e3), coarse)
max_ttl_st = st.one_of(st.floats(0.0, 1e4), coarse, st.just(1e300))


def brute_force(samples: list[float], b: float, c: float, max_ttl: float) -> tuple[float, float]:
    """Every candidate τ evaluated with the definition; first strict maximum wins."""
    n = len(samples)
    if n == 0:
        return 0.0, 0.0
    best_tau, best_value = 0.0, -math.inf
    for tau in sorted({0.0, *(s for s in samples if s <= max_ttl)}):
        k = sum(1 for s in samples if s <= tau)
        value = (k / n) * b - c * tau
        if value > best_value:
            best_tau, best_value = tau, value
    return best_tau, best_value


@given(samples_st, benefit_st, cost_st, max_ttl_st)
def test_equals_brute_force(impl, samples, b, c, max_ttl) -> None:
    assert impl.solve_ttl(samples, b, c, max_ttl) == brute_force(samples, b, c, max_ttl)


@given(samples_st, benefit_st, cost_st, max_ttl_st)
def test_tau_is_zero_or_a_sample_within_the_cap(impl, samples, b, c, max_ttl) -> None:
    tau, _ = impl.solve_ttl(samples, b, c, max_ttl)
    assert tau == 0.0 or tau in samples
    assert tau <= max_ttl


@given(samples_st, benefit_st, benefit_st, cost_st, max_ttl_st)
def test_tau_never_decreases_when_benefit_grows(impl, samples, b1, b2, c, max_ttl) -> None:
    lo, hi = sorted((b1, b2))
    assert impl.solve_ttl(samples, lo, c, max_ttl)[0] <= impl.solve_ttl(samples, hi, c, max_ttl)[0]


@given(samples_st, benefit_st, cost_st, cost_st, max_ttl_st)
def test_tau_never_increases_when_cost_grows(impl, samples, b, c1, c2, max_ttl) -> None:
    lo, hi = sorted((c1, c2))
    assert impl.solve_ttl(samples, b, hi, max_ttl)[0] <= impl.solve_ttl(samples, b, lo, max_ttl)[0]


@given(samples_st, benefit_st, cost_st, max_ttl_st)
def test_value_is_at_least_that_of_not_pinning(impl, samples, b, c, max_ttl) -> None:
    _, value = impl.solve_ttl(samples, b, c, max_ttl)
    zeros = sum(1 for s in samples if s == 0.0)
    assert value >= (zeros / len(samples) * b if samples else 0.0)


def test_empty_samples(impl) -> None:
    assert impl.solve_ttl([], 5.0, 1.0, 10.0) == (0.0, 0.0)
    assert impl.solve_ttl(iter(()), 5.0, 1.0, 10.0) == (0.0, 0.0)


def test_worked_example(impl) -> None:
    # n = 4: τ=1 → 0.25·8 − 1 = 1; τ=2 → 0.75·8 − 2 = 4; τ=9 → 8 − 9 = −1.
    assert impl.solve_ttl([2.0, 1.0, 9.0, 2.0], 8.0, 1.0, 100.0) == (2.0, 4.0)
    # Capped below 2: only τ=0 (0) and τ=1 (1) are allowed.
    assert impl.solve_ttl([2.0, 1.0, 9.0, 2.0], 8.0, 1.0, 1.5) == (1.0, 1.0)


def test_accepts_any_iterable_of_numbers(impl) -> None:
    np = pytest.importorskip("numpy")
    expected = impl.solve_ttl([1.0, 2.0, 3.0], 6.0, 0.5, 10.0)
    assert impl.solve_ttl(np.array([1.0, 2.0, 3.0]), 6.0, 0.5, 10.0) == expected
    assert impl.solve_ttl((x for x in (3, 2, 1)), 6, 0.5, 10) == expected
    assert impl.solve_ttl([np.float32(1.0), np.int64(2), True + 2], 6.0, 0.5, 10.0) == expected


def test_large_window_matches_brute_force(impl) -> None:
    # Long enough for every block of the native lane scan, with ties inside runs.
    samples = [math.floor(((i * 7919) % 1000) / 7) / 3 for i in range(5000)]
    for b, c in ((10.0, 0.01), (10.0, 0.0), (1.0, 0.5), (1e4, 1e-3)):
        assert impl.solve_ttl(samples, b, c, 1e9) == brute_force(samples, b, c, 1e9)
