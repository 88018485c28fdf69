"""ProgramScheduler per-operation cost with 100k waiting requests and 10k pins, both
backends side by side (run: bash scripts/bench.sh bench/micro/test_bench_scheduler.py).

Each round runs the operation ``OPS`` times on fresh ids and pytest-benchmark divides by the
iterations, so every figure is per operation; the batched forms are timed per call of
``BATCH`` requests (divide by 1000 for per request).  ``peek`` is the floor: the cost of any
call through the harness and the binding.
"""

from __future__ import annotations

import itertools
import random
from types import ModuleType

import numpy as np
import pytest

from ttlpolicy import PolicyConfig
from ttlpolicy.reference import policy as ref_policy
from ttlpolicy.reference import scheduler as ref_scheduler
from ttlpolicy.serving.skip_ahead import SKIP_DEPTH, skip_past

_native: ModuleType | None
try:
    from ttlpolicy import _native
except ImportError:
    _native = None

WAITING = 100_000
PINS = 10_000
ROUNDS, OPS = 10, 200  # 2000 operations: the state stays at ~100k waiting / ~10k pins
BATCH = 1000
STEP_S = 1e-3  # pins finish STEP_S apart, so each expire() call releases about one pin

BACKENDS = [
    pytest.param((ref_policy.TTLPolicy, ref_scheduler.ProgramScheduler), id="python"),
    pytest.param(
        (getattr(_native, "TTLPolicy", None), getattr(_native, "ProgramScheduler", None)),
        id="rust",
        marks=pytest.mark.skipif(_native is None, reason="native module not built"),
    ),
]


class Loaded:
    """A scheduler holding ``pins`` pinned programs and ``waiting`` waiting requests."""

    def __init__(self, classes, waiting: int, pins: int) -> None:
        policy_cls, sched_cls = classes
        self.s = sched_cls(policy_cls(PolicyConfig()), 10 * waiting, 10 * pins)
        s = self.s
        for i in range(pins):
            t = i * STEP_S
            s.arrive(f"p{i}", f"P{i}", t, 1)
            s.pop(t)
            assert s.finish(f"p{i}", t, 1, tool="bash", cache_miss_cost_s=100.0).pinned
        self.now = pins * STEP_S
        ids = [f"w{i}" for i in range(waiting)]
        s.arrive_many(ids, [f"W{i}" for i in range(waiting)], self.now, np.ones(waiting, np.int64))
        self.first_deadline_s = s.next_deadline_s
        assert s.pin_count == pins and s.waiting_count == waiting
        self.fresh = itertools.count()
        # ids made before timing, so the figures do not include Python string formatting
        n = 2 * (ROUNDS + 1) * OPS  # with room for the harness's own extra calls
        self.new_ids = iter([f"n{i}" for i in range(n)])
        # in id order: the first arrivals, laid out together in memory and mostly in the
        # heap's upper levels; at random: any waiting request, every structure it touches
        # cold (the worst case, reported beside it)
        self.waiting_ids = iter(ids[:n])
        self.random_waiting_ids = iter(random.Random(0).sample(ids, n))


@pytest.fixture(params=BACKENDS)
def loaded(request) -> Loaded:
    cfg = request.config
    if cfg.getoption("benchmark_disable") and not cfg.getoption("benchmark_enable"):
        # a plain test run only smoke-tests the benchmarks: a small state will do
        return Loaded(request.param, WAITING // 20, PINS // 4)
    return Loaded(request.param, WAITING, PINS)


def run(benchmark, fn, iterations=OPS):
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=iterations, warmup_rounds=1)


@pytest.mark.benchmark(group="scheduler: baseline, peek() (per op)")
def test_peek(benchmark, loaded):
    """The cost of any call through the harness and the binding: the floor of the others."""
    s = loaded.s
    run(benchmark, lambda: s.peek())


@pytest.mark.benchmark(group="scheduler: arrive (per op)")
def test_arrive(benchmark, loaded):
    s, now, ids = loaded.s, loaded.now, loaded.new_ids
    run(benchmark, lambda: s.arrive(next(ids), "N", now, 1))


@pytest.mark.benchmark(group="scheduler: pop (per op)")
def test_pop(benchmark, loaded):
    s, now = loaded.s, loaded.now
    run(benchmark, lambda: s.pop(now))


@pytest.mark.benchmark(group="scheduler: remove = abort (per op)")
def test_abort(benchmark, loaded):
    s, ids = loaded.s, loaded.waiting_ids
    run(benchmark, lambda: s.abort(next(ids)))


@pytest.mark.benchmark(group="scheduler: remove = abort, random waiting request (per op)")
def test_abort_random(benchmark, loaded):
    s, ids = loaded.s, loaded.random_waiting_ids
    run(benchmark, lambda: s.abort(next(ids)))


@pytest.mark.benchmark(group="scheduler: expire, ~1 pin per call (per op)")
def test_expire(benchmark, loaded):
    s, fresh, t0 = loaded.s, loaded.fresh, loaded.first_deadline_s
    run(benchmark, lambda: s.expire(t0 + next(fresh) * STEP_S))


@pytest.mark.benchmark(group="scheduler: finish with a pin decision (per op)")
def test_pop_finish(benchmark, loaded):
    s, now = loaded.s, loaded.now

    def pop_finish():
        s.finish(s.pop(now), now, 1, tool="bash", cache_miss_cost_s=100.0)

    run(benchmark, pop_finish)


@pytest.mark.benchmark(group="scheduler: arrive_many, 1000 per call (per request)")
def test_arrive_many(benchmark, loaded):
    s, now = loaded.s, loaded.now
    pids = ["N"] * BATCH
    blocks = np.ones(BATCH, np.int64)

    batches = iter([[f"n{k}.{j}" for j in range(BATCH)] for k in range(2 * ROUNDS + 2)])
    benchmark.extra_info["requests_per_call"] = BATCH
    benchmark.pedantic(lambda: s.arrive_many(next(batches), pids, now, blocks), rounds=ROUNDS,
                       iterations=1, warmup_rounds=1)  # fmt: skip


@pytest.mark.benchmark(group="scheduler: pop_many, 1000 per call (per request)")
def test_pop_many(benchmark, loaded):
    s, now = loaded.s, loaded.now
    benchmark.extra_info["requests_per_call"] = BATCH
    benchmark.pedantic(lambda: s.pop_many(BATCH, now), rounds=ROUNDS, iterations=1,
                       warmup_rounds=1)  # fmt: skip


def returning_state(classes, waiting: int):
    """A scheduler serving by attained service (``serve_order="attained"``) with ``waiting``
    returning calls queued, each program's service different and in random order, so every
    push and pop sifts through distinct ranks."""
    policy_cls, sched_cls = classes
    s = sched_cls(policy_cls(PolicyConfig(serve_order="attained")), 10 * waiting, 0)
    ids, pids = [f"w{i}" for i in range(waiting)], [f"W{i}" for i in range(waiting)]
    ones = np.ones(waiting, np.int64)
    s.arrive_many(ids, pids, 0.0, ones)
    s.pop_many(waiting, 0.0)
    for j, i in enumerate(random.Random(1).sample(range(waiting), waiting)):
        s.finish(ids[i], j * 1e-4, 1, tool="bash", cache_miss_cost_s=0.0)  # service j·0.1 ms
    now = waiting * 1e-4
    s.arrive_many([f"r{i}" for i in range(waiting)], pids, now, ones)
    assert s.waiting_count == waiting
    return s, now


@pytest.fixture(params=BACKENDS)
def attained(request):
    cfg = request.config
    smoke = cfg.getoption("benchmark_disable") and not cfg.getoption("benchmark_enable")
    return returning_state(request.param, WAITING // 20 if smoke else WAITING)


@pytest.mark.benchmark(group="scheduler: pop, returning calls by attained service (per op)")
def test_pop_attained(benchmark, attained):
    s, now = attained
    run(benchmark, lambda: s.pop(now))


@pytest.mark.benchmark(group="scheduler: first_waiting(9) (per op)")
def test_first_waiting(benchmark, loaded):
    """What the skip past a large head reads of the queue (``skip_ahead.SKIP_DEPTH + 1``)."""
    s = loaded.s
    run(benchmark, lambda: s.first_waiting(SKIP_DEPTH + 1))


@pytest.mark.benchmark(group="scheduler: skip past a large head, none fits (per op)")
def test_skip_past_none_fits(benchmark, loaded):
    """The skip's whole decision when it asks the most: every one of the next ``SKIP_DEPTH``
    waiting requests asked whether it fits (none does; the engine's own check not counted)."""
    s = loaded.s
    head = s.peek()
    run(benchmark, lambda: skip_past(s, head, SKIP_DEPTH, lambda rid: False, lambda rid: True))
