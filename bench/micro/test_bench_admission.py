"""AdmissionControl per-call cost, both backends side by side
(run: bash scripts/bench.sh bench/micro/test_bench_admission.py).

State: a policy whose "bash" window holds 1024 tool gaps; 16 admitted programs away on
"bash" (the working set is summed over them: each needs its next use, a binary search in the
window) and 1,000 programs waiting for admission, the oldest of which does not fit.  Each
round runs the operation ``OPS`` times; figures are per call.
"""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from ttlpolicy import PolicyConfig
from ttlpolicy.reference import admission as ref_admission
from ttlpolicy.reference import policy as ref_policy

_native: ModuleType | None
try:
    from ttlpolicy import _native
except ImportError:
    _native = None

ADMITTED, WAITING = 16, 1000
ROUNDS, OPS = 10, 200
NOW = 120.0

BACKENDS = [
    pytest.param((ref_policy.TTLPolicy, ref_admission.AdmissionControl), id="python"),
    pytest.param(
        (getattr(_native, "TTLPolicy", None), getattr(_native, "AdmissionControl", None)),
        id="rust",
        marks=pytest.mark.skipif(_native is None, reason="native module not built"),
    ),
]


@pytest.fixture(params=BACKENDS)
def loaded(request):
    policy_cls, ac_cls = request.param
    policy = policy_cls(PolicyConfig())
    rng = random.Random(0)
    for _ in range(1024):
        policy.observe_tool("bash", rng.expovariate(1 / 8.0))
    ac = ac_cls(policy, 6668)
    for i in range(ADMITTED):
        ac.arrive(f"A{i}", float(i), 400)
        assert ac.may_run(f"A{i}", float(i))
    for i in range(ADMITTED):
        ac.finish(f"A{i}", 100.0 + i, 400, tool="bash", rebuild_s=8.0)
    for i in range(WAITING):
        ac.arrive(f"W{i}", 116.0, 6000)
    assert ac.admitted_count == ADMITTED and not ac.may_run("W0", NOW)
    return ac


def run(benchmark, fn):
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=OPS, warmup_rounds=1)


@pytest.mark.benchmark(group="admission: may_run(), an admitted program (per call)")
def test_may_run_admitted(benchmark, loaded):
    run(benchmark, lambda: loaded.may_run("A3", NOW))


@pytest.mark.benchmark(group="admission: may_run(), the head refused (16-program working set)")
def test_may_run_head_refused(benchmark, loaded):
    run(benchmark, lambda: loaded.may_run("W0", NOW))


@pytest.mark.benchmark(group="admission: next_shrink_s(), 16 programs away (per call)")
def test_next_shrink(benchmark, loaded):
    # each of the 16 is in the working set (next use within 16 x 8 s); the reference scans
    # the 1024 durations past its time away one by one, the core skips runs of them
    run(benchmark, lambda: loaded.next_shrink_s(NOW))


@pytest.mark.benchmark(group="admission: arrive() + finish() of a turn (per pair)")
def test_turn(benchmark, loaded):
    def turn():
        loaded.arrive("A5", NOW, 410)
        loaded.finish("A5", NOW, 410, "bash", 8.0)

    run(benchmark, turn)


@pytest.mark.benchmark(group="admission: eviction_order() of 8 programs (per call)")
def test_eviction_order(benchmark, loaded):
    ids = [f"A{i}" for i in range(8)]
    run(benchmark, lambda: loaded.eviction_order(ids, NOW))
