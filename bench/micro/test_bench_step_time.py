"""The simulator's step-time model, both backends side by side
(run: bash scripts/bench.sh bench/micro/test_bench_step_time.py).

What the engine asks per run of steps: build the run from its first step's shape (a decode
batch of 8 sequences, ~60k tokens of context each), its time over k steps, and the step at
which it reaches the next event; and the time of a single step.  Each round runs the
operation ``OPS`` times; figures are per call.
"""

from __future__ import annotations

import pytest

from ttlpolicy import native
from ttlpolicy.sim import roofline
from ttlpolicy.sim.hardware import native_steps

ROUNDS, OPS = 20, 500
REFERENCE = roofline("llama-3.1-8b", "h100-80g").steps
SHAPE = (8.0, 480_000.0, 8.0, 480_000.0, 8.0, 8.0)  # tokens, attn0, d_attn, kv0, d_kv, seqs
K = 400

BACKENDS = [
    pytest.param(lambda: REFERENCE, id="python"),
    pytest.param(
        lambda: native_steps(REFERENCE),
        id="rust",
        marks=pytest.mark.skipif(native is None, reason="native module not built"),
    ),
]


@pytest.fixture(params=BACKENDS)
def steps(request):
    return request.param()


def run(benchmark, fn):
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=OPS, warmup_rounds=1)


@pytest.mark.benchmark(group="step time: a run built, timed over k steps, cut at an event")
def test_run_to_event(benchmark, steps):
    s_k = steps.run(*SHAPE).s(K)

    def plan_and_cut():
        times = steps.run(*SHAPE)
        times.reach(0.0, 0.4 * times.s(K), K, s_k)

    run(benchmark, plan_and_cut)


@pytest.mark.benchmark(group="step time: one step")
def test_one_step(benchmark, steps):
    run(benchmark, lambda: steps.step_s(8.0, 480_000.0, 480_000.0, 8.0))
