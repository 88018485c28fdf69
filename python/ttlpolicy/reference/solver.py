"""The TTL solver: one rule serves CacheTTL (per tool) and Kareto (per prefix group).

Holding a cache for τ seconds costs ``cost_per_s · τ``; it pays ``benefit_s`` if the owner
comes back within τ, which happens with probability P(τ) = fraction of past samples ≤ τ.
P is a step function and the cost is linear, so the optimum sits at 0 or on a sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._validate import non_negative


def check_samples(samples_s: Iterable[float]) -> list[float]:
    try:
        items = iter(samples_s)
    except TypeError:
        kind = type(samples_s).__name__
        raise TypeError(f"samples_s must be an iterable of numbers, got {kind}") from None
    out = []
    for i, s in enumerate(items):
        out.append(non_negative(f"samples_s[{i}]", s))
    return out


def solve_sorted(
    sorted_samples_s: Sequence[float], benefit_s: float, cost_per_s: float, max_ttl_s: float
) -> tuple[float, float, int]:
    """Exact argmax over τ ∈ {0} ∪ {samples ≤ max_ttl_s} of P(τ)·benefit − cost·τ.

    ``sorted_samples_s`` must be sorted ascending and valid.  Returns (τ, value, k) where k is
    the number of samples ≤ τ (so P(τ) = k / n).  Ties go to the smaller τ.
    """
    n = len(sorted_samples_s)
    if n == 0:
        return 0.0, 0.0, 0
    best_tau, best_k = 0.0, 0
    # τ = 0 still catches samples that are exactly 0.
    while best_k < n and sorted_samples_s[best_k] <= 0.0:
        best_k += 1
    best_value = (best_k / n) * benefit_s
    i = best_k
    while i < n:
        tau = sorted_samples_s[i]
        if tau > max_ttl_s:
            break
        held = cost_per_s * tau
        # No later τ' ≥ τ can win: its value is P'·benefit − cost·τ' ≤ benefit − cost·τ, and
        # rounding is monotone, so the float bound holds too.  Stopping changes no result.
        if benefit_s - held <= best_value:
            break
        # P(τ) counts every sample equal to τ: jump to the end of the run of equal values.
        while i + 1 < n and sorted_samples_s[i + 1] == tau:
            i += 1
        k = i + 1
        value = (k / n) * benefit_s - held
        if value > best_value:
            best_tau, best_value, best_k = tau, value, k
        i += 1
    return best_tau, best_value, best_k


def solve_ttl(
    samples_s: Iterable[float], benefit_s: float, cost_per_s: float, max_ttl_s: float
) -> tuple[float, float]:
    """``(tau_s, value)``: the TTL that maximises P(τ)·benefit_s − cost_per_s·τ, τ ≤ max_ttl_s.

    Empty samples give ``(0.0, 0.0)``.  NaN, infinite or negative inputs raise ``ValueError``.
    """
    benefit_s = non_negative("benefit_s", benefit_s)
    cost_per_s = non_negative("cost_per_s", cost_per_s)
    max_ttl_s = non_negative("max_ttl_s", max_ttl_s)
    samples = check_samples(samples_s)
    samples.sort()
    tau, value, _ = solve_sorted(samples, benefit_s, cost_per_s, max_ttl_s)
    return tau, value
