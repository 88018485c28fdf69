"""Random interleavings of program turns, tool calls, aborts, pressure and time on the real tree:
pins never exceed the budget, never leak, and the tree's own sizes always add up."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens

KV = 256
MAX_HISTORY = 120  # a program whose context passes this ends with its next turn


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


def submit(s: MiniScheduler, c: Programs, p: int, n: int, last: bool) -> None:
    """Program ``p`` sends its next turn (``n`` new tokens), unless one is in flight."""
    if p in c.live:
        return
    prompt = c.history.get(p, []) + c.fresh(n)
    last = last or len(prompt) > MAX_HISTORY
    c.live[p] = s.submit(prompt, program=c.name(p), tool="bash", last_turn=last)
    c.last[p] = last


def finish(s: MiniScheduler, c: Programs, req: Any, n_out: int) -> None:
    """The request's turn ends after ``n_out`` tokens (in a tool call, or the program ends)."""
    p = c.program_of(req)
    try:
        s.finish(req, c.fresh(n_out))
    except RuntimeError as e:  # no room for its last tokens: nothing allocated, still running
        assert "Out of memory" in str(e)
        everything_yielded(s)
        return
    if p is None:
        return
    if c.last[p]:
        c.end(p)
    else:
        c.history[p] = list(req.origin_input_ids) + list(req.output_ids)
        del c.live[p]


def everything_yielded(s: MiniScheduler) -> None:
    """An allocation ran out of memory.  SGLang retracts running requests for memory but never
    its last one: when it is the last, every pin and every prefix held for a waiting request
    must have yielded first (else the adapter, not the workload, made it fail)."""
    if len(s.running) == 1:
        assert s.ttl.programs.pin_count == 0
        assert s.ttl.handover.held_tokens() == 0


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


class Interleavings(RuleBasedStateMachine):
    """Programs, anonymous requests, engine steps, aborts, decode pressure and time, in any
    order; after every rule the tree and the pins must add up (``check``)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        knobs = {"TTLPOLICY_POLICY": TEST_POLICY, "TTLPOLICY_PIN_BUDGET_FRACTION": "0.5"}
        with mock.patch.dict(os.environ, knobs):  # read when the cache is built
            self.s = make_scheduler(KV, "ttlpolicy", self.clock)
        self.c = Programs()
        self.seen: set[str] = set()

    def _pick(self, reqs: list, i: int) -> object:
        return reqs[i % len(reqs)]

    @rule(p=st.integers(0, 3), n=st.integers(1, 30), last=st.integers(0, 4))
    def turn(self, p: int, n: int, last: int) -> None:
        submit(self.s, self.c, p, n, last == 0)

    @rule(n=st.integers(1, 30))
    def every_idle_program_sends_a_turn(self, n: int) -> None:
        for p in range(4):
            submit(self.s, self.c, p, n, False)

    @rule(n=st.integers(1, 100))
    def anonymous(self, n: int) -> None:
        self.s.submit(self.c.fresh(n))

    @rule()
    def schedule(self) -> None:
        self.s.schedule()

    @rule(k=st.integers(1, 4), n_out=st.integers(1, 6))
    def engine_step(self, k: int, n_out: int) -> None:
        self.s.schedule()
        for req in list(self.s.running.values())[:k]:
            finish(self.s, self.c, req, n_out)

    @rule()
    def a_pass_that_admits_nothing(self) -> None:
        self.s.order()  # the adapter has caught up with SGLang's queue
        assert self.s.ttl.programs.waiting_count == len(self.s.waiting)
        assert self.s.ttl.programs.running_count == len(self.s.running)

    @precondition(lambda self: self.s.running)
    @rule(i=st.integers(0, 7), n_out=st.integers(1, 6))
    def finish_one(self, i: int, n_out: int) -> None:
        finish(self.s, self.c, self._pick(list(self.s.running.values()), i), n_out)

    @precondition(lambda self: self.s.running)
    @rule(i=st.integers(0, 7), n=st.integers(1, 80))
    def decode(self, i: int, n: int) -> None:
        # May need more than free + evictable: eviction reclaims pins, and when even that
        # is not enough SGLang's allocation fails with nothing allocated.
        try:
            self.s.decode(self._pick(list(self.s.running.values()), i), self.c.fresh(n))
        except RuntimeError as e:
            assert "Out of memory" in str(e)
            everything_yielded(self.s)

    @precondition(lambda self: self.s.waiting)
    @rule(i=st.integers(0, 7))
    def abort_waiting(self, i: int) -> None:
        req = self._pick(self.s.waiting, i)
        p = self.c.program_of(req)
        self.s.abort_waiting(req)
        if p is not None:
            self.c.end(p)

    @precondition(lambda self: self.s.running)
    @rule(i=st.integers(0, 7))
    def abort_running(self, i: int) -> None:
        req = self._pick(list(self.s.running.values()), i)
        p = self.c.program_of(req)
        self.s.abort_running(req)
        if p is not None:
            self.c.end(p)

    @rule(seconds=st.floats(0.0, 40.0))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def the_tree_and_the_pins_add_up(self) -> None:
        check(self.s)
        m = self.s.ttl.metrics
        for name in ("pins", "expiries", "reclaims", "released_at_once", "pinned_prefix_hits"):
            if getattr(m, name) and name not in self.seen:
                self.seen.add(name)
                event(f"{name} > 0")

    def teardown(self) -> None:
        # The end: every client goes away, time passes every deadline: nothing is left.
        s = self.s
        for req in list(s.waiting):
            s.abort_waiting(req)
        for req in list(s.running.values()):
            s.abort_running(req)
        check(s)
        self.clock.advance(1000.0)
        s.order()
        assert s.ttl.live_requests() == 0
        assert s.ttl.programs.pin_count == 0 and not s.ttl.pins.programs()
        assert s.ttl.handover.held_tokens() == 0
        assert s.cache.protected_size() == 0, "no lock is left on the tree"
        available = s.cache.token_to_kv_pool_allocator.available_size()
        assert s.cache.evictable_size() + available == KV


Interleavings.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_pins_never_exceed_the_budget_nor_leak = Interleavings.TestCase
