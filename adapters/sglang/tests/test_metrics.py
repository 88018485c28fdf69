"""The ``ttlpolicy_*`` Prometheus metrics of the SGLang adapter on SGLang's real radix tree and
scheduling pass (CPU pools, no model): each counter moves as the workload says it must.

The exporter is built when SGLang runs with ``--enable-metrics`` (``CacheInitParams.
enable_metrics``); here it writes to a registry of the test's own, so that the figures are
this workload's alone, except in the last test, which takes SGLang's own path from the
scheduler process to the server's ``/metrics`` (multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
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
    # held back, it needs no memory, so a's pin stays
    clock.advance(0.5)
    b = s.submit(tokens(30_000, PROMPT), program="b", last_turn=True)
    assert s.schedule() == [] and s.schedule() == []
    assert value(registry, "ttlpolicy_admission_refusals_total") == 1
    assert value(registry, "ttlpolicy_programs_awaiting_admission") == 1
    assert value(registry, "ttlpolicy_pins_reclaimed_total") == 0
    # so a's return finds its pin; its last turn ends it, then b runs
    back = s.submit(ctx + tokens(92_000, 5), program="a", last_turn=True)
    assert s.schedule() == [back]
    s.finish(back, tokens(93_000, 2))
    assert s.schedule() == [b]
    assert value(registry, "ttlpolicy_returns_hit_total") == 2
    assert value(registry, "ttlpolicy_returns_hit_tokens_total") == 2 * (PROMPT + OUT) + 14
    s.finish(b, tokens(94_000, 2))
    # "d" and "e" start together (both fit the working set); d ends pinned, then e decodes
    # past the free and evictable slots: the eviction reclaims d's pin, and d's return
    # misses it for that cause
    d = s.submit(tokens(50_000, 150), program="d", tool="bash")
    e = s.submit(tokens(60_000, 150), program="e", last_turn=True)
    assert s.schedule() == [d, e]
    s.finish(d, tokens(50_150, OUT))
    ctx = tokens(50_000, 150) + tokens(50_150, OUT)
    s.decode(e, tokens(61_000, 200))  # 150 + 200 > 512 - 170 pinned
    s.order()  # (a pass publishes)
    assert value(registry, "ttlpolicy_pins_reclaimed_total") == 1
    s.finish(e, tokens(62_000, 2))
    turn(ctx + tokens(97_000, 5), tokens(98_000, 2), "d", last_turn=True)
    assert value(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 1
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
    assert value(registry, "ttlpolicy_programs_ended_total") == 5  # a to e
    # turns that ended in a tool call: a twice, d, c; returns: a twice, d, c
    assert value(registry, "ttlpolicy_ttl_seconds_count") == 4
    assert value(registry, "ttlpolicy_tool_gap_seconds_count") == 4
    assert value(registry, "ttlpolicy_return_queue_wait_seconds_count") == 4
    assert value(registry, "ttlpolicy_pinned_blocks") == 0
    assert value(registry, "ttlpolicy_pinned_programs") == 0
    assert value(registry, "ttlpolicy_programs_awaiting_admission") == 0
    assert value(registry, "ttlpolicy_kv_blocks") == KV
    assert value(registry, "ttlpolicy_schedule_calls_total") == s.ttl.metrics.schedule_calls > 0


#: The scheduler process of ``--enable-metrics``: SGLang's scheduler metrics and the tree cache
#: built with ``enable_metrics`` (the exporter on the client's global registry, whose values
#: are files in PROMETHEUS_MULTIPROC_DIR), then one program: a tool call, back after 1 s.
SCHEDULER_PROCESS = """
import ttlpolicy_sglang
from sglang.srt.observability.metrics_collector import SchedulerMetricsCollector
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs
from sglang_engine import FakeClock, make_scheduler, tokens

ttlpolicy_sglang.register()
# this process's place in the groups, which the scheduler process learns when it builds them
# (the tree cache's own metrics label their series with it)
get_parallel().override_permanently(tp_rank=0, pp_rank=0)
clock = FakeClock()
s = make_scheduler({kv}, "ttlpolicy", clock, enable_metrics=True)
# SGLang's own scheduler metrics, with the labels SchedulerMetricsCollectorContext.init_new
# gives them
labels = {{"model_name": "dummy", "engine_type": "unified", "tp_rank": 0, "pp_rank": 0,
          "moe_ep_rank": 0}}
collector = SchedulerMetricsCollector(labels=labels, server_args=ServerArgs(model_path="dummy"))
collector._log_gauge(collector.num_running_reqs, 1)  # (as its log_stats does)
first = tokens(10_000, {prompt})
req = s.submit(first, program="a", tool="bash")
assert s.schedule() == [req]
s.finish(req, tokens(20_000, {out}))
clock.advance(1.0)
req = s.submit(first + tokens(20_000, {out}) + tokens(30_000, 10), program="a", last_turn=True)
assert s.schedule() == [req]
s.finish(req, tokens(40_000, 2))  # the last request: idle, the figures are published
"""


def test_with_enable_metrics_the_scheduler_process_metrics_reach_sglangs_metrics_endpoint(
    policy_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SGLang's path with ``--enable-metrics``: its launcher sets PROMETHEUS_MULTIPROC_DIR
    (``set_prometheus_multiproc_dir``) before the scheduler process starts; that process
    builds the tree cache with ``enable_metrics`` and its own ``SchedulerMetricsCollector``;
    the HTTP server mounts ``/metrics`` with ``add_prometheus_middleware`` (a
    ``MultiProcessCollector`` over the folder).  Here the scheduler process is a subprocess
    and the server's app is a bare Starlette app with SGLang's own ``/metrics`` mount."""
    from prometheus_client.parser import text_string_to_metric_families
    from sglang.srt.utils.common import add_prometheus_middleware
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    policy_env.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    code = textwrap.dedent(SCHEDULER_PROCESS.format(kv=KV, prompt=PROMPT, out=OUT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert any(tmp_path.glob("*.db")), "the scheduler process wrote no metrics files"
    app = Starlette()
    add_prometheus_middleware(app)
    response = TestClient(app).get("/metrics")
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }

    def scraped(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        assert key in samples, (
            f"{key} not on /metrics: {sorted(k for k in samples if 'ttl' in k[0])}"
        )
        return samples[key]

    sglang_labels = dict(
        model_name="dummy", engine_type="unified", tp_rank="0", pp_rank="0", moe_ep_rank="0"
    )
    assert scraped("sglang:num_running_reqs", **sglang_labels) == 1  # SGLang's, beside ours
    assert scraped("ttlpolicy_pins_total") == 1
    assert scraped("ttlpolicy_pins_handed_over_total") == 1
    assert scraped("ttlpolicy_returns_hit_total") == 1
    assert scraped("ttlpolicy_returns_hit_tokens_total") == PROMPT + OUT
    assert scraped("ttlpolicy_programs_ended_total") == 1
    assert scraped("ttlpolicy_ttl_seconds_count") == 1
    assert scraped("ttlpolicy_tool_gap_seconds_sum") == pytest.approx(1.0)
    assert scraped("ttlpolicy_return_queue_wait_seconds_count") == 1
    assert scraped("ttlpolicy_returns_missed_total", cause="expired") == 0
    assert scraped("ttlpolicy_kv_blocks") == KV  # (a gauge: summed over live processes)
