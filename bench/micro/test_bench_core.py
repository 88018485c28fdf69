"""Decision core speed, both backends side by side (one pytest-benchmark group per operation).

Run: bash scripts/bench.sh -k core   (figures go to bench/RESULTS.md, "Decision core").
"""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from ttlpolicy.reference import policy as ref_policy
from ttlpolicy.reference import solver as ref_solver

_native: ModuleType | None
try:
    from ttlpolicy import _native
except ImportError:  # the reference alone still runs
    _native = None

WINDOW = 1024


class Api:
    def __init__(self, name: str, policy_mod: ModuleType, solver_mod: ModuleType) -> None:
        self.name, self.TTLPolicy, self.solve_ttl = name, policy_mod.TTLPolicy, solver_mod.solve_ttl


BACKENDS = [pytest.param(Api("python", ref_policy, ref_solver), id="python")]
BACKENDS.append(
    pytest.param(
        Api("rust", _native, _native) if _native else None,
        id="rust",
        marks=pytest.mark.skipif(_native is None, reason="native module not built"),
    )
)


def durations(n: int, seed: int) -> list[float]:
    """Tool durations in seconds: lognormal, median ≈ 2.7 s, long tail."""
    rng = random.Random(seed)
    return [rng.lognormvariate(1.0, 1.0) for _ in range(n)]


def full_policy(api: Api):
    policy = api.TTLPolicy()
    for d in durations(WINDOW, seed=1):
        policy.observe_tool("search", d)
    assert policy.tool_count("search") == WINDOW
    return policy


@pytest.mark.parametrize("api", BACKENDS)
@pytest.mark.benchmark(group="decide: tool CDF, full 1024-sample window")
def test_decide_full_window(benchmark, api: Api) -> None:
    policy = full_policy(api)
    # Cheap holding (10 of 1000 active blocks) against a 2 s miss: the optimum lies deep in
    # the window, so the scan visits nearly every sample.
    kw = dict(
        tool="search", request_blocks=10, mean_active_blocks=1000.0, cache_miss_cost_s=2.0, now=1.0
    )
    d = benchmark(policy.decide, **kw)
    assert d.source == "tool_cdf" and d.p_return > 0.9


@pytest.mark.parametrize("api", BACKENDS)
@pytest.mark.benchmark(group="decide: exponential prior (cold start)")
def test_decide_cold_start(benchmark, api: Api) -> None:
    policy = api.TTLPolicy()
    kw = dict(
        tool="search", request_blocks=10, mean_active_blocks=1000.0, cache_miss_cost_s=2.0, now=1.0
    )
    d = benchmark(policy.decide, **kw)
    assert d.source == "exponential_prior"


@pytest.mark.parametrize("api", BACKENDS)
@pytest.mark.benchmark(group="solve_ttl: 10k unsorted samples (list)")
def test_solve_ttl_10k(benchmark, api: Api) -> None:
    samples = durations(10_000, seed=2)
    tau, _ = benchmark(api.solve_ttl, samples, 2.0, 0.01, 300.0)
    assert 0.0 < tau <= 300.0


@pytest.mark.parametrize("api", BACKENDS)
@pytest.mark.benchmark(group="observe_tool: into a full 1024-sample window")
def test_observe_tool(benchmark, api: Api) -> None:
    policy = full_policy(api)
    rng = random.Random(4)
    values = [rng.lognormvariate(1.0, 1.0) for _ in range(4096)]
    state = {"i": 0}

    def observe() -> None:
        i = state["i"] = (state["i"] + 1) & 4095
        policy.observe_tool("search", values[i])

    benchmark(observe)
    assert policy.tool_count("search") == WINDOW


@pytest.mark.parametrize("api", BACKENDS)
@pytest.mark.benchmark(group="observe_program + observe_queueing_delay (256-windows)")
def test_observe_estimators(benchmark, api: Api) -> None:
    policy = api.TTLPolicy()
    for i in range(256):
        policy.observe_program(1 + i % 17)
        policy.observe_queueing_delay(0.01 * (i % 13))

    def observe() -> None:
        policy.observe_program(7)
        policy.observe_queueing_delay(0.05)

    benchmark(observe)
    assert 0.0 <= policy.eta <= 1.0
