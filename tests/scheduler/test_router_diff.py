"""ProgramRouter: the Rust core and the Python reference agree on any interleaving of
reports, pins, drains, removals, routes and policy observations (hypothesis stateful testing:
results, errors by type and message, every view after each step), bad values mixed in: return
queues given or not (or half given), evictions reported by homes and by others, pins claimed
by others, expired or at a given clock; also under a policy whose miss cost is inf (NaN
costs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from parity import close, outcome, plain
from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key

#: one more than the bound, and one bad id
INSTANCES = ["i0", "i1", "i2", "i3", "i4", ""]
#: of no tenant and of two tenants (the table's bound, 3, is shared fairly among them)
PROGRAMS = ["A", "B", "C", *(program_key(tenant_key(t), p) for t, p in ("xD", "xE", "yF"))]
COUNTS = st.one_of(*[st.integers(0, 200)] * 6, st.sampled_from([-1, 1 << 41, 2.5]))
TOKENS = st.integers(0, 1 << 20)
FRACTIONS = st.one_of(*[st.floats(0.0, 1.0)] * 6, st.sampled_from([float("nan"), -0.1, 1.5]))


def views(router: Any) -> Any:
    return plain((
        router.instance_ids, router.program_count,
        [router.home(p) for p in PROGRAMS], [router.routable(i) for i in router.instance_ids],
    ))  # fmt: skip


class RouterMachine(RuleBasedStateMachine):
    BACKENDS: tuple[Any, ...] = ()  # set per test
    CONFIG = PolicyConfig(min_prefill_samples=3)

    def __init__(self) -> None:
        super().__init__()
        self.routers = []
        for be in self.BACKENDS:
            policy = be.TTLPolicy(self.CONFIG)
            router = be.ProgramRouter(policy, 4, 3)
            for iid in ("i0", "i1"):
                router.add_instance(iid)
                router.report(iid, 100, 100, 0, 0, 0, 1.0)
            self.routers.append(router)
        self.now = 0.0

    def step(self, call: Callable[[Any], Any]) -> Any:
        results = [outcome(partial(call, r)) for r in self.routers]
        assert close(results[0], results[1]), results
        return results[0]

    @rule(iid=st.sampled_from(INSTANCES))
    def add(self, iid: str) -> None:
        self.step(lambda r: r.add_instance(iid))

    @rule(iid=st.sampled_from(INSTANCES), free=COUNTS, total=COUNTS, queue=COUNTS,
          tokens=st.one_of(COUNTS, TOKENS), ws=COUNTS, cached=FRACTIONS)  # fmt: skip
    def report(self, iid, free, total, queue, tokens, ws, cached) -> None:
        self.step(lambda r: r.report(iid, free, total, queue, tokens, ws, cached))

    @rule(iid=st.sampled_from(INSTANCES), queue=COUNTS, tokens=st.one_of(COUNTS, TOKENS),
          returns=st.one_of(st.none(), COUNTS),
          return_tokens=st.one_of(st.none(), COUNTS, TOKENS))  # fmt: skip
    def report_returns(self, iid, queue, tokens, returns, return_tokens) -> None:
        """A report with a return queue (maybe bad: over the queue, half given, negative)."""
        self.step(lambda r: r.report(iid, 50, 100, queue, tokens, 20, 0.5, returns, return_tokens))

    @rule(iid=st.sampled_from(INSTANCES[:4]), free=st.integers(0, 200), extra=st.integers(0, 50),
          queue=st.integers(0, 3), tokens=st.integers(0, 1 << 16), ws=st.integers(0, 250),
          share=st.sampled_from([0.0, 0.5, 1.0]),
          cached=st.sampled_from([0.0, 0.5, 1.0]))  # fmt: skip
    def valid_return_report(self, iid, free, extra, queue, tokens, ws, share, cached) -> None:
        """A report a program-FCFS instance would send: a part of its queue returns."""
        returns, return_tokens = int(queue * share), int(tokens * share)
        self.step(lambda r: r.report(iid, free, free + extra, queue, tokens, ws, cached,
                                     returns, return_tokens))  # fmt: skip

    @rule(iid=st.sampled_from(INSTANCES), pid=st.sampled_from(PROGRAMS), held=COUNTS)
    def evicted(self, iid, pid, held) -> None:
        self.step(lambda r: r.evicted(iid, pid, held))

    @rule(iid=st.sampled_from(INSTANCES[:4]), free=st.integers(0, 200), extra=st.integers(0, 50),
          queue=st.integers(0, 3), tokens=st.integers(0, 1 << 16), ws=st.integers(0, 250),
          cached=st.sampled_from([0.0, 0.5, 1.0]))  # fmt: skip
    def valid_report(self, iid, free, extra, queue, tokens, ws, cached) -> None:
        """A report an instance would send (ties of cost are common: empty queues)."""
        self.step(lambda r: r.report(iid, free, free + extra, queue, tokens, ws, cached))

    @rule(iid=st.sampled_from(INSTANCES), pid=st.sampled_from(PROGRAMS),
          ttl=st.sampled_from([0.0, 1.0, 30.0, float("nan")]), blocks=COUNTS)  # fmt: skip
    def pinned(self, iid, pid, ttl, blocks) -> None:
        self.step(lambda r: r.pinned(iid, pid, self.now + ttl, blocks))

    @rule(iid=st.sampled_from(INSTANCES), pid=st.sampled_from(PROGRAMS),
          ttl=st.sampled_from([-1.0, 0.0, 1.0, 30.0]),
          ahead=st.sampled_from([0.0, 2.0, math.nan]))  # fmt: skip
    def pinned_at(self, iid, pid, ttl, ahead) -> None:
        """A pin checked against the caller's clock (``now``), maybe ahead of the router's."""
        self.step(lambda r: r.pinned(iid, pid, self.now + ttl, 5, self.now + ahead))

    @rule(iid=st.sampled_from(INSTANCES))
    def drain(self, iid: str) -> None:
        self.step(lambda r: r.drain(iid))

    @rule(iid=st.sampled_from(INSTANCES))
    def remove(self, iid: str) -> None:
        self.step(lambda r: r.remove_instance(iid))

    @rule(pid=st.sampled_from(PROGRAMS))
    def end(self, pid: str) -> None:
        self.step(lambda r: r.end_program(pid))

    @rule(pid=st.sampled_from(PROGRAMS), dt=st.sampled_from([0.0, 0.5, 5.0, -1.0]),
          blocks=COUNTS, prefix=st.one_of(COUNTS, st.integers(0, 1 << 18)))  # fmt: skip
    def route(self, pid, dt, blocks, prefix) -> None:
        kind, _ = self.step(lambda r: r.route(pid, self.now + dt, blocks, prefix))
        if kind == "ok" and dt > 0:
            self.now += dt

    @rule(pid=st.sampled_from(PROGRAMS), prefix=st.integers(1 << 14, 1 << 18))
    def return_to_a_home_finding_every_prefix_cached(self, pid, prefix) -> None:
        """Homed at i1 (i0 full when it came), it returns with a long context to a home
        finding every prefix cached: under an overflowing miss model, cost 0 · inf there."""
        self.step(lambda r: r.report("i0", 0, 100, 0, 0, 100, 1.0))
        self.step(lambda r: r.route(pid, self.now, 10, prefix))
        self.step(lambda r: r.report("i0", 100, 100, 0, 0, 0, 1.0))
        self.step(lambda r: r.report("i1", 100, 100, 0, 0, 0, 1.0))
        self.step(lambda r: r.route(pid, self.now, 10, prefix))

    @rule(tokens=st.integers(1, 1 << 16), per_token_s=st.floats(1e-6, 1e-3),
          delay_s=st.floats(0.0, 10.0))  # fmt: skip
    def observe(self, tokens, per_token_s, delay_s) -> None:
        """The policy learns: the miss model is fitted, T moves (both policies alike)."""
        for r in self.routers:
            r.policy.observe_prefill(tokens, tokens * per_token_s)
            r.policy.observe_queueing_delay(delay_s)

    @invariant()
    def same_views(self) -> None:
        a, b = (views(r) for r in self.routers)
        assert close(a, b), (a, b)
        assert self.routers[0].program_count <= 3


def test_router_backends_agree(backends):
    run_state_machine_as_test(
        type("Machine", (RouterMachine,), {"BACKENDS": backends}),
        settings=settings(stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture]),
    )  # fmt: skip


def test_router_backends_agree_when_a_miss_costs_inf(backends):
    """``prefill_s_per_token2=1e300``: the miss cost of a long prefix is inf, costs NaN."""
    run_state_machine_as_test(
        type("Machine", (RouterMachine,), {
            "BACKENDS": backends, "CONFIG": PolicyConfig(prefill_s_per_token2=1e300),
        }),
        settings=settings(stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture]),
    )  # fmt: skip
