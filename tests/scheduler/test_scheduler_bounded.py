"""Bounded state: an engine that never ends its programs holds bounded memory, because idle
programs (no live request, no pin) are capped, the one idle longest forgotten first and
counted in ``dropped_idle_programs``.  Both backends."""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest

from parity import PINNING_MISS_COST_S, assert_same, outcome
from parity import scheduler_snapshot as snapshot
from ttlpolicy.ids import program_key, tenant_key

#: Programs fed by the memory test. The reference is ~20x slower per call, so it gets a tenth
#: of them: still 50x its cap, enough for unbounded growth to show (~1 KB per program).
PROGRAMS = {"rust": 1_000_000, "python": 100_000}
CAP = 1000
BATCH = 1000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_programs_that_never_end_hold_flat_memory(impl):
    n = PROGRAMS[impl.name]
    s = impl.ProgramScheduler(impl.TTLPolicy(), 10 * BATCH, 0, max_idle_programs=CAP)
    ones = np.ones(BATCH, np.int64)
    rss = {}
    for b in range(n // BATCH):
        ids = [f"r{b}.{i}" for i in range(BATCH)]
        s.arrive_many(ids, [f"P{b}.{i}" for i in range(BATCH)], float(b), ones)
        for rid in s.pop_many(BATCH, float(b)):
            s.finish(rid, float(b), 1)  # the program now waits on a tool call, forever
        if b + 1 in (n // BATCH // 10, n // BATCH):
            rss[b + 1] = rss_bytes()
    assert s.program_count == CAP
    assert s.dropped_idle_programs == n - CAP
    assert s.waiting_count == s.running_count == 0
    grown = rss[n // BATCH] - rss[n // BATCH // 10]
    # 90 % of the programs arrived after the first measurement: unbounded state would grow
    # by ~100 MB (Rust) to ~90 MB (reference) here
    assert grown < 16 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over {0.9 * n:.0f} programs"


def finish_one(s, rid, pid, now, **kw):
    s.arrive(rid, pid, now, 1)
    assert s.pop(now) == rid
    return s.finish(rid, now, 1, **kw)


def test_the_idle_program_forgotten_is_the_one_idle_longest(impl):
    s = impl.ProgramScheduler(impl.TTLPolicy(), 100, 10, max_idle_programs=2)
    finish_one(s, "a1", "A", 0.0)
    finish_one(s, "b1", "B", 1.0)
    finish_one(s, "a2", "A", 2.0)  # A is back: B is now idle longest
    finish_one(s, "c1", "C", 3.0)
    assert s.dropped_idle_programs == 1
    with pytest.raises(KeyError):
        s.end_program("B")
    assert s.end_program("A").turns == 2
    # a pinned program is not idle; it becomes idle when its pin is released
    assert finish_one(s, "d1", "D", 4.0, cache_miss_cost_s=PINNING_MISS_COST_S).pinned
    finish_one(s, "e1", "E", 5.0)
    assert s.program_count == 3 and s.dropped_idle_programs == 1
    released = s.reclaim(1, 6.0)
    assert [p.program_id for p in released] == ["D"]
    assert s.program_count == 2 and s.dropped_idle_programs == 2  # C was idle longest
    with pytest.raises(KeyError):
        s.end_program("C")


def test_a_forgotten_program_returns_as_a_new_one(impl):
    s = impl.ProgramScheduler(impl.TTLPolicy(), 100, 10, max_idle_programs=0)
    finish_one(s, "a1", "A", 0.0, tool="bash")
    assert s.program_count == 0 and s.dropped_idle_programs == 1
    finish_one(s, "a2", "A", 5.0)
    # its tool gap was forgotten with it: no duration observed
    assert s.policy.tool_count("bash") == 0


def test_the_cap_is_validated_alike(backends):
    for bad in (-1, 2**33, 1.0, "8", None):
        results = [outcome(partial(make_capped, be, bad)) for be in backends]
        assert_same(results[0], results[1], f"max_idle_programs={bad!r}")
        assert results[0][0] == "raised"


def make_capped(be, cap):
    return be.ProgramScheduler(be.TTLPolicy(), 10, 1, cap)


def test_a_tenant_flooding_idle_programs_forgets_its_own(impl):
    """3 idle programs remembered: tenant b's, idle longest, is kept while tenant a's 10 go
    idle after it (past the cap a holds more than b: its own idle longest go)."""
    a, b = tenant_key("a"), tenant_key("b")
    s = impl.ProgramScheduler(impl.TTLPolicy(), 100, 10, max_idle_programs=3)
    finish_one(s, "b1", program_key(b, "p"), 0.0)
    for i in range(10):
        finish_one(s, f"a{i}", program_key(a, f"p{i}"), 1.0 + i)
    assert (s.program_count, s.dropped_idle_programs) == (3, 8)
    assert s.end_program(program_key(b, "p")).turns == 1
    assert s.end_program(program_key(a, "p9")).turns == 1
    with pytest.raises(KeyError):
        s.end_program(program_key(a, "p7"))


#: programs of no tenant and of two
PIDS = [f"P{i}" for i in range(4)]
PIDS += [program_key(tenant_key(t), f"P{i}") for t in "xy" for i in range(4)]


def step_and_expire(s, step, pid):
    now = float(step)
    pinning = float(step % 3)  # 0: no benefit, no pin
    return finish_one(s, f"r{step}", pid, now, tool="t", cache_miss_cost_s=pinning), s.expire(now)


def test_backends_agree_under_the_cap(backends):
    states = [be.ProgramScheduler(be.TTLPolicy(), 100, 6, max_idle_programs=3) for be in backends]
    rng = np.random.default_rng(7)
    for step in range(400):
        pid = PIDS[rng.integers(0, len(PIDS))]
        outs = [outcome(partial(step_and_expire, s, step, pid)) for s in states]
        assert_same(outs[0], outs[1], f"step {step}")
        assert_same(snapshot(states[0]), snapshot(states[1]), f"after step {step}")
    assert states[0].dropped_idle_programs > 0
