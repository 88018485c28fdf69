"""ProgramRouter per-decision cost, both backends side by side
(run: bash scripts/bench.sh bench/micro/test_bench_router.py).

State: 64 instances, all reported (queues of 0 to 7 calls, half of each a return queue,
working sets of all sizes), and 100,000 programs homed on them (the table full: a new
program forgets the least recent one), a quarter of them holding a live pin.  Each round
runs the operation ``OPS`` times; figures are per call, from Python.  Target (issue 31): a
decision under 5 µs on the Rust core.
"""

from __future__ import annotations

import itertools
import random
from types import ModuleType

import pytest

from ttlpolicy import PolicyConfig
from ttlpolicy.reference import policy as ref_policy
from ttlpolicy.reference import router as ref_router

_native: ModuleType | None
try:
    from ttlpolicy import _native
except ImportError:
    _native = None

INSTANCES, PROGRAMS = 64, 100_000
ROUNDS, OPS = 10, 500

BACKENDS = [
    pytest.param((ref_policy.TTLPolicy, ref_router.ProgramRouter), id="python"),
    pytest.param(
        (getattr(_native, "TTLPolicy", None), getattr(_native, "ProgramRouter", None)),
        id="rust",
        marks=pytest.mark.skipif(_native is None, reason="native module not built"),
    ),
]


def report_all(router, rng: random.Random) -> None:
    for i in range(INSTANCES):
        free, queue, tokens = rng.randrange(0, 20_000), rng.randrange(8), rng.randrange(200_000)
        # (a part of each queue returns: program-FCFS instances report it)
        router.report(f"i{i}", free, 20_000, queue, tokens, rng.randrange(20_000), rng.random(),
                      queue // 2, tokens // 2)  # fmt: skip


@pytest.fixture(params=BACKENDS, scope="module")
def loaded(request):
    policy_cls, router_cls = request.param
    policy = policy_cls(PolicyConfig())
    policy.observe_queueing_delay(2.0)
    router = router_cls(policy, INSTANCES, PROGRAMS)
    rng = random.Random(0)
    for i in range(INSTANCES):
        router.add_instance(f"i{i}")
    report_all(router, rng)
    # the programs' homes, spread over the instances, as the instances' pins report them (a
    # quarter live; routing each would price 64 queues per program: minutes in the reference)
    for p in range(PROGRAMS):
        router.pinned(f"i{p % INSTANCES}", f"p{p}", 1e9 if p % 4 == 0 else 0.0, 100)
    assert router.program_count == PROGRAMS
    return router, rng, itertools.count(1)


def run(benchmark, fn):
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=OPS, warmup_rounds=1)


@pytest.mark.benchmark(group="router: route(), a returning program (64 instances, 100k programs)")
def test_route_returning(benchmark, loaded):
    router, rng, tick = loaded
    report_all(router, rng)
    programs = itertools.cycle([f"p{p}" for p in range(0, PROGRAMS, 97)])
    run(benchmark, lambda: router.route(next(programs), float(next(tick)), 120, 7000))


@pytest.mark.benchmark(group="router: route(), a new program (the table full: one forgotten)")
def test_route_new(benchmark, loaded):
    router, rng, tick = loaded
    report_all(router, rng)
    ids = (f"n{k}" for k in itertools.count())
    run(benchmark, lambda: router.route(next(ids), float(next(tick)), 100, 6400))


@pytest.mark.benchmark(group="router: report() of one instance (per call)")
def test_report(benchmark, loaded):
    router, _rng, _tick = loaded
    run(benchmark, lambda: router.report("i7", 5_000, 20_000, 3, 40_000, 12_000, 0.8, 1, 9_000))
