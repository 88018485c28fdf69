"""Random interleavings of program turns, tool calls, aborts, pressure and time on the real tree:
pins never exceed the budget, never leak, and the tree's own sizes always add up."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

KV = 256
MAX_HISTORY = 120  # a program whose context passes this ends with its next turn

last_turn = st.integers(0, 4).map(lambda x: x == 0)
turn = st.tuples(st.just("turn"), st.integers(0, 3), st.integers(1, 60), last_turn)
# An engine step: a scheduling pass, then up to k running requests finish.
step = st.tuples(st.just("step"), st.integers(1, 4), st.integers(1, 10))
ops = st.lists(
    st.one_of(
        turn,
        turn,
        step,
        step,
        st.tuples(st.just("anon"), st.integers(1, 120)),
        st.tuples(st.just("schedule")),
        st.tuples(st.just("pass")),
        st.tuples(st.just("finish"), st.integers(0, 7), st.integers(1, 10)),
        st.tuples(st.just("decode"), st.integers(0, 7), st.integers(1, 80)),
        st.tuples(st.just("abort_waiting"), st.integers(0, 7)),
        st.tuples(st.just("abort_running"), st.integers(0, 7)),
        st.tuples(st.just("tick"), st.floats(0.0, 40.0)),
    ),
    min_size=5,
    max_size=60,
)


@dataclass
class Programs:
    """The client side: each program's context so far and its live request."""

    history: dict[int, list[int]] = field(default_factory=dict)
    generation: dict[int, int] = field(default_factory=dict)
    live: dict[int, object] = field(default_factory=dict)
    last: dict[int, bool] = field(default_factory=dict)
    next_token: int = 1

    def fresh(self, n: int) -> list[int]:
        out = tokens(self.next_token, n)
        self.next_token += n
        return out

    def name(self, p: int) -> str:
        return f"prog{p}.{self.generation.get(p, 0)}"

    def end(self, p: int) -> None:
        self.history.pop(p, None)
        self.live.pop(p, None)
        self.generation[p] = self.generation.get(p, 0) + 1

    def program_of(self, req: object) -> int | None:
        return next((p for p, r in self.live.items() if r is req), None)


def finish(s: MiniScheduler, c: Programs, req: object, n_out: int) -> None:
    """The request's turn ends after ``n_out`` tokens (in a tool call, or the program ends)."""
    p = c.program_of(req)
    s.finish(req, c.fresh(n_out))
    if p is None:
        return
    if c.last[p]:
        c.end(p)
    else:
        c.history[p] = list(req.origin_input_ids) + list(req.output_ids)
        del c.live[p]


def check(s: MiniScheduler) -> None:
    ttl, cache = s.ttl, s.cache
    assert ttl.programs.pinned_blocks <= ttl.pin_budget_blocks
    assert ttl.pins.held_tokens() <= ttl.pin_budget_tokens
    # Every pin the ProgramScheduler holds has its locks, and no lock outlives its pin.
    assert {p.program_id for p in ttl.programs.pins()} == set(ttl.pins.programs())
    running_prefix = sum(r.kv.cache_protected_len for r in s.running.values())
    locked = ttl.pins.held_tokens() + ttl.handover.held_tokens() + running_prefix
    assert cache.protected_size() <= locked
    # Conservation: every KV slot is free, in the tree, or in a running request's own row.
    own = sum(r.kv.kv_allocated_len - r.kv.cache_protected_len for r in s.running.values())
    available = cache.token_to_kv_pool_allocator.available_size()
    assert cache.protected_size() + cache.evictable_size() + available + own == KV


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ops)
def test_pins_never_exceed_the_budget_nor_leak(monkeypatch: pytest.MonkeyPatch, ops) -> None:
    monkeypatch.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    monkeypatch.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.5")
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    c = Programs()
    for op in ops:
        kind = op[0]
        if kind == "turn":
            _, p, n, last = op
            if p in c.live:
                continue
            prompt = c.history.get(p, []) + c.fresh(n)
            last = last or len(prompt) > MAX_HISTORY
            c.live[p] = s.submit(prompt, program=c.name(p), tool="bash", last_turn=last)
            c.last[p] = last
        elif kind == "anon":
            s.submit(c.fresh(op[1]))
        elif kind == "schedule":
            s.schedule()
        elif kind == "step":
            s.schedule()
            for req in list(s.running.values())[: op[1]]:
                finish(s, c, req, op[2])
        elif kind == "pass":
            # A pass with nothing admitted: the adapter has caught up with SGLang's queue.
            s.order()
            assert s.ttl.programs.waiting_count == len(s.waiting)
            assert s.ttl.programs.running_count == len(s.running)
        elif kind in ("finish", "decode", "abort_running") and s.running:
            req = list(s.running.values())[op[1] % len(s.running)]
            p = c.program_of(req)
            if kind == "decode":
                # May need more than free + evictable: eviction reclaims pins, and when even
                # that is not enough SGLang's allocation fails with nothing allocated.
                try:
                    s.decode(req, c.fresh(op[2]))
                except RuntimeError as e:
                    assert "Out of memory" in str(e)
            elif kind == "finish":
                finish(s, c, req, op[2])
            else:
                s.abort_running(req)
                if p is not None:
                    c.end(p)
        elif kind == "abort_waiting" and s.waiting:
            req = s.waiting[op[1] % len(s.waiting)]
            p = c.program_of(req)
            s.abort_waiting(req)
            if p is not None:
                c.end(p)
        elif kind == "tick":
            clock.advance(op[1])
        check(s)
    m = s.ttl.metrics
    for name in ("pins", "expiries", "reclaims", "released_at_once", "pinned_prefix_hits"):
        event(f"{name} > 0" if getattr(m, name) else f"{name} == 0")
    # The end: every client goes away, time passes every deadline.
    for req in list(s.waiting):
        s.abort_waiting(req)
    for req in list(s.running.values()):
        s.abort_running(req)
    check(s)
    clock.advance(1000.0)
    s.order()
    assert s.ttl.live_requests() == 0
    assert s.ttl.programs.pin_count == 0 and not s.ttl.pins.programs()
    assert s.ttl.handover.held_tokens() == 0
    assert s.cache.protected_size() == 0, "no lock is left on the tree"
    available = s.cache.token_to_kv_pool_allocator.available_size()
    assert s.cache.evictable_size() + available == KV
