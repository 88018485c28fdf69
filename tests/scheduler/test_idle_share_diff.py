"""The idle-program caps shared fairly among tenants (``reference/fair_order.py``): random
traffic of four tenants (the shared one among them) at caps 0-4, with pins that expire, on
both backends' ``ProgramScheduler`` and ``AdmissionControl`` — every count, every program
known or admitted, every error alike."""

from __future__ import annotations

import random
from functools import partial

import pytest

from parity import PINNING_MISS_COST_S
from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key

PIDS = ["A", "B"] + [program_key(tenant_key(t), f"p{i}") for t in "xyz" for i in range(4)]


def scheduler_step(s, rnd: random.Random, step: int, now: float) -> tuple:
    pid = rnd.choice(PIDS)
    rid = f"r{step}"
    s.arrive(rid, pid, now, 1)
    s.pop(now)
    miss = PINNING_MISS_COST_S if rnd.random() < 0.3 else 0.0
    last = rnd.random() < 0.1
    s.finish(rid, now, 1, tool="t", cache_miss_cost_s=miss, last_turn=last)
    s.expire(now)
    return s.program_count, s.dropped_idle_programs


def admission_step(ac, rnd: random.Random, now: float) -> tuple:
    pid = rnd.choice(PIDS)
    ac.arrive(pid, now, 10)
    ac.may_run(pid, now)
    if rnd.random() < 0.1:
        ac.end(pid)
    else:
        ac.finish(pid, now, 10, tool="t")
    return (ac.program_count, ac.dropped_idle_programs, ac.admitted_count,
            tuple(ac.admitted(p) for p in PIDS))  # fmt: skip


def outcome(call) -> tuple:
    try:
        return ("ok", call())
    except Exception as e:  # (both backends must fail alike)
        return ("raised", type(e).__name__, str(e))


@pytest.mark.parametrize("seed", range(30))
def test_idle_caps_agree_on_random_traffic(backends, seed: int) -> None:
    cap = seed % 5
    schedulers = [b.ProgramScheduler(b.TTLPolicy(PolicyConfig()), 100, 10,
                                     max_idle_programs=cap) for b in backends]  # fmt: skip
    controls = [b.AdmissionControl(b.TTLPolicy(PolicyConfig()), 1000, max_idle_programs=cap)
                for b in backends]  # fmt: skip
    rnds = [random.Random(seed) for _ in range(4)]
    for step in range(150):
        now = float(step)
        got = [outcome(partial(scheduler_step, s, r, step, now))
               for s, r in zip(schedulers, rnds[:2], strict=True)]  # fmt: skip
        assert got[0] == got[1], (step, got)
        got = [outcome(partial(admission_step, a, r, now))
               for a, r in zip(controls, rnds[2:], strict=True)]  # fmt: skip
        assert got[0] == got[1], (step, got)
