"""The ``ttlpolicy_*`` Prometheus metrics of the SGLang adapter on SGLang's real radix tree and
scheduling pass (CPU pools, no model): each counter moves as the workload says it must.

The exporter is built when SGLang runs with ``--enable-metrics`` (``CacheInitParams.
enable_metrics``); here it writes to a registry of the test's own, so that the figures are
this workload's alone."""

from __future__ import annotations

from typing import Any

import pytest
from ttlpolicy_sglang.programs import ProgramTracker

from conftest import FakeClock, MiniScheduler, make_scheduler, tokens
from ttlpolicy.serving import EngineKnobs, PrometheusExporter

# SGLang requires prometheus-client (its Requires-Dist); the test venv installs SGLang with
# --no-deps and requirements/sglang.txt does not list it yet.
prometheus_client = pytest.importorskip("prometheus_client")
CollectorRegistry = prometheus_client.CollectorRegistry

KV = 512
PROMPT, OUT = 300, 20


def value(registry: Any, name: str, **labels: str) -> float:
    v = registry.get_sample_value(name, labels)
    assert v is not None, f"{name} {labels} not exported"
    return v


def exported(s: MiniScheduler) -> Any:
    registry = CollectorRegistry()
    s.ttl.metrics.exporter = PrometheusExporter(registry)
    s.ttl.metrics.publish_interval_s = 0.0  # every pass publishes: exact figures at once
    return registry


def test_metrics_follow_enable_metrics_and_the_knob(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    assert s.ttl.metrics.exporter is None  # SGLang without --enable-metrics: none
    knobs = EngineKnobs.from_env()
    on = ProgramTracker(s.cache, KV, 1, knobs, enable_metrics=True)
    assert on.metrics.exporter is not None
    policy_env.setenv("TTLPOLICY_METRICS", "0")
    off = ProgramTracker(s.cache, KV, 1, EngineKnobs.from_env(), enable_metrics=True)
    assert off.metrics.exporter is None
    policy_env.setenv("TTLPOLICY_METRICS", "yes")
    with pytest.raises(ValueError, match="TTLPOLICY_METRICS must be 0 or 1, got 'yes'"):
        EngineKnobs.from_env()


def test_a_program_life_and_a_held_back_newcomer_move_the_counters(policy_env) -> None:
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    registry = exported(s)

    def turn(tokens_in: list[int], out: list[int], program: str, **kw: Any) -> list[int]:
        req = s.submit(tokens_in, program=program, **kw)
        assert s.schedule() == [req]
        s.finish(req, out)
        return tokens_in + out

    # "a" turn 1 ends in a tool call: pinned (a TTL decided)
    ctx = turn(tokens(10_000, PROMPT), tokens(10_000 + PROMPT, OUT), "a", tool="bash")
    assert value(registry, "ttlpolicy_pins_total") == 1
    assert value(registry, "ttlpolicy_pinned_blocks") == PROMPT + OUT  # (page size 1)
    # back after 1 s: the pin is handed over at arrival and taken when admitted; pinned again
    clock.advance(1.0)
    ctx = turn(ctx + tokens(90_000, 10), tokens(91_000, 4), "a", tool="bash")
    assert value(registry, "ttlpolicy_pins_handed_over_total") == 1
    assert value(registry, "ttlpolicy_returns_hit_total") == 1
    assert value(registry, "ttlpolicy_returns_hit_tokens_total") == PROMPT + OUT
    assert value(registry, "ttlpolicy_tool_gap_seconds_sum") == pytest.approx(1.0)
    assert value(registry, "ttlpolicy_pins_total") == 2
    # "b" arrives while "a" is away: load control holds it back (counted once for its wait);
    # at the queue's head it is short of memory, and a's pin gives way
    clock.advance(0.5)
    b = s.submit(tokens(30_000, PROMPT), program="b", last_turn=True)
    assert s.schedule() == [] and s.schedule() == []
    assert value(registry, "ttlpolicy_admission_refusals_total") == 1
    assert value(registry, "ttlpolicy_programs_awaiting_admission") == 1
    assert value(registry, "ttlpolicy_pins_reclaimed_total") == 1
    # so a's return misses its pin, for that cause; its last turn ends it, then b runs
    back = s.submit(ctx + tokens(92_000, 5), program="a", last_turn=True)
    assert s.schedule() == [back]
    assert value(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 1
    s.finish(back, tokens(93_000, 2))
    assert s.schedule() == [b]
    s.finish(b, tokens(94_000, 2))
    # "c" stays away past max_ttl_s: its pin expires, and its return misses it for that cause
    ctx = turn(tokens(40_000, PROMPT), tokens(40_000 + PROMPT, OUT), "c", tool="bash")
    clock.advance(31.0)
    s.order()
    assert value(registry, "ttlpolicy_pins_expired_total") == 1
    turn(ctx + tokens(95_000, 5), tokens(96_000, 2), "c", last_turn=True)
    assert value(registry, "ttlpolicy_returns_missed_total", cause="expired") == 1
    for cause in ("not_pinned", "budget_full"):
        assert value(registry, "ttlpolicy_returns_missed_total", cause=cause) == 0
    s.order()  # a pass refreshes the gauges
    assert value(registry, "ttlpolicy_programs_ended_total") == 3
    assert value(registry, "ttlpolicy_ttl_seconds_count") == 3  # turns that ended in a tool call
    assert value(registry, "ttlpolicy_tool_gap_seconds_count") == 3  # returns: a twice, c once
    assert value(registry, "ttlpolicy_return_queue_wait_seconds_count") == 3
    assert value(registry, "ttlpolicy_pinned_blocks") == 0
    assert value(registry, "ttlpolicy_pinned_programs") == 0
    assert value(registry, "ttlpolicy_programs_awaiting_admission") == 0
    assert value(registry, "ttlpolicy_kv_blocks") == KV
    assert value(registry, "ttlpolicy_schedule_calls_total") == s.ttl.metrics.schedule_calls > 0
