"""Differential test at scale: hundreds of waiting requests churned by arrivals, pops,
preemptions, finishes, pins and aborts give identical results on both backends.

The other differential test draws from 12 request ids, so the queue never holds many
entries; the Rust queue removes aborted requests lazily (dead entries stay in the heap until
they reach the top or outnumber the live ones, then a sweep rebuilds it, and their slots are
reused only afterwards), which needs hundreds of aborts among hundreds of waiting requests to
be exercised. Seeded, so a failure replays.
"""

from __future__ import annotations

import random
from functools import partial

import pytest

from parity import assert_same, outcome
from parity import scheduler_snapshot as snapshot
from ttlpolicy import PolicyConfig


def churn(s, rng: random.Random, steps: int):
    """Yields (step, what, call) for a random but valid-heavy workload on scheduler `s`."""
    live: list[str] = []  # request ids believed live (errors are compared too)
    now, fresh = 0.0, 0
    for step in range(steps):
        now += rng.choice([0.0, 0.0, 0.01, 0.5, 20.0])
        r = rng.random()
        # the first half fills the queue; the second mostly aborts, so that the dead entries
        # come to outnumber the live ones (a sweep) while arrivals still reuse freed slots
        if step > steps // 2:
            r = 0.0 if r < 0.05 else 0.35 + 0.25 * r if r < 0.8 else r
        if r < 0.35:
            n = rng.randint(1, 12)
            rids = [f"q{fresh + i}" for i in range(n)]
            fresh += n
            pids = [f"P{rng.randrange(150)}" for _ in rids]
            live += rids
            yield step, "arrive_many", partial(s.arrive_many, rids, pids, now, [1] * n)
        elif r < 0.60 and live:
            # mostly waiting requests, anywhere in the queue: buried, not removed
            victim = live.pop(rng.randrange(len(live)))
            yield step, "abort", partial(s.abort, victim)
        elif r < 0.72:
            yield step, "pop_many", partial(s.pop_many, rng.randint(0, 6), now)
        elif r < 0.85 and live:
            rid = rng.choice(live)
            last = rng.random() < 0.2
            if last:
                live.remove(rid)
            tool = rng.choice([None, "bash", "grep"])
            yield step, "finish", partial(s.finish, rid, now, rng.randint(0, 20), tool=tool,
                                          last_turn=last, cache_miss_cost_s=100.0)  # fmt: skip
        elif r < 0.90 and live:
            yield step, "preempt", partial(s.preempt, rng.choice(live), now)
        elif r < 0.95:
            yield step, "expire", partial(s.expire, now)
        elif r < 0.98:
            yield step, "reclaim", partial(s.reclaim, rng.randint(0, 60), now)
        else:
            yield step, "end_program", partial(s.end_program, f"P{rng.randrange(150)}")


@pytest.mark.parametrize("handover", ["arrival", "schedule"])
@pytest.mark.parametrize("seed", [1, 2])
def test_backends_agree_under_churn(backends, handover, seed):
    config = PolicyConfig(min_tool_samples=2, min_total_samples=3, eta_min_programs=2,
                          pin_handover=handover)  # fmt: skip
    runs = []
    for b in backends:
        policy = b.TTLPolicy(config)
        s = b.ProgramScheduler(policy, 100_000, 400, max_idle_programs=40)
        runs.append((s, churn(s, random.Random(seed), 3000)))
    deepest = 0
    for (step, what, call_ref), (_, _, call_native) in zip(runs[0][1], runs[1][1], strict=True):
        got = [outcome(call_ref), outcome(call_native)]
        assert_same(got[0], got[1], f"step {step}: {what}")
        if step % 25 == 0 or what == "abort":
            views = [snapshot(s) for s, _ in runs]
            assert_same(views[0], views[1], f"views after step {step}: {what}")
        deepest = max(deepest, runs[0][0].waiting_count)
    # the scale this test exists for: hundreds waiting, so aborts bury deep in the heap,
    # then most of them aborted
    assert deepest >= 300 and runs[0][0].waiting_count < deepest // 3
    # and the queue drains in the same order
    drained = [s.pop_many(10**6, 10**6) for s, _ in runs]
    assert_same(drained[0], drained[1], "the final drain")
    assert len(drained[0]) > 0
