"""The adapters' Prometheus metrics (``ttlpolicy.serving.prometheus``): names and labels by
Prometheus' rules, the exposition parses back with every metric, the exporter follows
``AdapterMetrics`` (one set of counters), the multiprocess mode the engines use, and
``ttlpolicy`` imports without ``prometheus_client``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ttlpolicy.serving import METRICS, MISS_CAUSES, AdapterMetrics, PrometheusExporter
from ttlpolicy.serving.prometheus import _batchable

# Prometheus' data model: metric and label names, and the suffixes the client adds.
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
UNITS = ("_seconds", "_blocks", "_tokens")
#: The only label and its values: a bounded set, never an id.
BOUNDED_LABELS = {"cause": set(MISS_CAUSES)}


def scrape(registry: CollectorRegistry) -> dict[str, object]:
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"{name} {labels} not exported"
    return value


def test_names_follow_prometheus_rules_and_carry_their_units() -> None:
    names = [spec.name for spec in METRICS.values()]
    assert len(set(names)) == len(names)
    for key, spec in METRICS.items():
        assert NAME.match(spec.name) and spec.name.startswith("ttlpolicy_"), spec.name
        assert not spec.name.endswith("_total"), spec.name  # (the client adds it to counters)
        assert spec.help.strip() and spec.help.endswith("."), spec.name
        for label in spec.labels:
            assert LABEL.match(label) and not label.startswith("__"), label
            assert label in BOUNDED_LABELS, f"{spec.name}: unbounded label {label!r}"
        if spec.kind == "histogram":
            assert spec.name.endswith("_seconds") and key.endswith("_s")
            assert list(spec.buckets) == sorted(set(spec.buckets)), spec.name
        if key.endswith("_s") or "blocks" in key or "tokens" in key:
            assert spec.name.endswith(UNITS), f"{spec.name}: the unit belongs in the name"


def test_every_metric_is_exposed_and_parses_back_with_its_type_and_help() -> None:
    registry = CollectorRegistry()
    PrometheusExporter(registry)
    families = scrape(registry)
    for spec in METRICS.values():
        family = families[spec.name]
        assert family.type == spec.kind and family.documentation == spec.help  # type: ignore[attr-defined]
    causes = {s.labels["cause"] for s in families["ttlpolicy_returns_missed"].samples}  # type: ignore[attr-defined]
    assert causes == set(MISS_CAUSES)  # each cause at 0 from the start: rates exist at once


def test_a_second_exporter_in_a_process_shares_the_first_ones_metrics() -> None:
    registry = CollectorRegistry()
    first, second = PrometheusExporter(registry), PrometheusExporter(registry)
    assert first.objects is second.objects  # (the client refuses a name registered twice)


def test_an_unknown_pin_release_cause_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="cause must be 'expired' or 'reclaimed', got 'lost'"):
        AdapterMetrics().pin_gone("p", "lost")


def test_a_program_life_moves_each_metric_as_it_must() -> None:
    registry = CollectorRegistry()
    m = AdapterMetrics(
        pin_budget_blocks=50, total_blocks=100, exporter=PrometheusExporter(registry)
    )
    m.arrived("a", "a1", 0.0, handed_over=False)  # a first request: no return
    m.admitted("a", "a1", 0.5, hit_tokens=0)
    m.decided("a", 1.0, ttl_s=30.0, pinned_blocks=7)  # pinned
    m.arrived("a", "a2", 4.0, handed_over=True)  # back after 3 s, onto its pin
    m.admitted("a", "a2", 4.25, hit_tokens=112)
    m.decided("a", 5.0, ttl_s=30.0, pinned_blocks=8)
    m.pin_gone("a", "expired")
    m.arrived("a", "a3", 60.0, handed_over=False)  # missed: expired
    m.admitted("a", "a3", 61.0, hit_tokens=0)
    m.decided("a", 62.0, ttl_s=0.0, pinned_blocks=None)  # TTL 0
    m.arrived("a", "a4", 63.0, handed_over=False)  # missed: not pinned
    m.held_back("b")
    m.held_back("b")  # one wait, counted once
    m.ended("a")
    m.pinned_blocks_now, m.pinned_programs_now = 8, 1
    m.publish()
    assert m.pins == 2 and m.pinned_blocks_total == 15 and m.pins_handed_over == 1
    assert (m.returns_missed_expired, m.returns_missed_not_pinned) == (1, 1)
    assert m.pinned_prefix_hits == 1 and m.pinned_prefix_hit_tokens == 112
    assert m.programs_ended == 1 and m.admission_refusals == 1 and m.expiries == 1
    assert sample(registry, "ttlpolicy_pins_total") == 2
    assert sample(registry, "ttlpolicy_pin_blocks_total") == 15
    assert sample(registry, "ttlpolicy_returns_hit_total") == 1
    assert sample(registry, "ttlpolicy_returns_hit_tokens_total") == 112
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="expired") == 1
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="not_pinned") == 1
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 0
    assert sample(registry, "ttlpolicy_admission_refusals_total") == 1
    assert sample(registry, "ttlpolicy_pinned_blocks") == 8
    assert sample(registry, "ttlpolicy_pin_budget_blocks") == 50
    assert sample(registry, "ttlpolicy_kv_blocks") == 100
    # TTLs 30, 30, 0; gaps 3, 55, 1 s; the queue waits of the returns a2, a3: 0.25, 1 s
    assert sample(registry, "ttlpolicy_ttl_seconds_count") == 3
    assert sample(registry, "ttlpolicy_ttl_seconds_bucket", le="0.0") == 1
    assert sample(registry, "ttlpolicy_tool_gap_seconds_sum") == pytest.approx(59.0)
    assert sample(registry, "ttlpolicy_return_queue_wait_seconds_sum") == pytest.approx(1.25)
    assert sample(registry, "ttlpolicy_return_queue_wait_seconds_count") == 2


def test_publishing_waits_its_interval_unless_forced() -> None:
    registry = CollectorRegistry()
    m = AdapterMetrics(exporter=PrometheusExporter(registry), publish_interval_s=3600.0)
    assert m.publish_due() and not AdapterMetrics().publish_due()  # (no exporter: never)
    m.pins = 1
    m.publish()
    assert not m.publish_due()
    m.pins, m.pinned_blocks_now = 3, 9
    m.publish()  # within the interval: nothing moves
    assert sample(registry, "ttlpolicy_pins_total") == 1
    assert sample(registry, "ttlpolicy_pinned_blocks") == 0
    m.publish(force=True)  # (the engine goes idle)
    assert sample(registry, "ttlpolicy_pins_total") == 3
    assert sample(registry, "ttlpolicy_pinned_blocks") == 9


def test_slow_steps_share_a_publication_until_it_grows_stale(monkeypatch) -> None:
    """Past the interval a publication waits for PUBLISH_MIN_STEPS steps, or for
    PUBLISH_STALE_INTERVALS intervals when steps are slower still."""
    import types

    from ttlpolicy.serving import metrics

    now = [100.0]
    monkeypatch.setattr(metrics, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    registry = CollectorRegistry()
    m = AdapterMetrics(exporter=PrometheusExporter(registry), publish_interval_s=0.5)
    m.publish()
    m.pins = 1
    now[0] += 0.6  # past the interval, no step since
    assert not m.publish_due()
    m.schedule_calls = metrics.PUBLISH_MIN_STEPS - 1
    m.publish()
    assert sample(registry, "ttlpolicy_pins_total") == 0
    m.schedule_calls += 1
    assert m.publish_due()
    m.publish()
    assert sample(registry, "ttlpolicy_pins_total") == 1
    m.pins = 2
    m.schedule_calls += 1  # one slow step
    now[0] += 0.5 * metrics.PUBLISH_STALE_INTERVALS - 0.01
    assert not m.publish_due()
    now[0] += 0.01
    m.publish()
    assert sample(registry, "ttlpolicy_pins_total") == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([0.0, 0.5, 1.0, 30.0, 120.0, 300.0, 600.0, 1e9]),  # on a bound, past
            st.floats(0.0, 1e4, allow_nan=False),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_a_batch_of_values_lands_as_the_clients_own_observe_puts_them(
    values: list[float], batched: bool
) -> None:
    """``observe`` increments each bucket once per batch; the client's ``observe`` of each
    value, in a registry of its own, is the reference (its bucket bounds are inclusive)."""
    ours, reference = CollectorRegistry(), CollectorRegistry()
    exporter, by_value = PrometheusExporter(ours), PrometheusExporter(reference)
    assert exporter.batched  # the client installed here is laid out as checked
    exporter.batched = batched  # (False: the per-value path kept for other layouts)
    for key in ("ttl_s", "tool_gap_s"):
        exporter.observe(key, values)
        for value in values:
            by_value.histograms[key].observe(value)

    def samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        return [
            (s.name, s.labels, s.value)
            for family in scrape(registry).values()
            for s in family.samples  # type: ignore[attr-defined]
            if not s.name.endswith("_created")  # (when each registry was made)
        ]

    assert samples(ours) == samples(reference)


def test_events_touch_no_client_object_until_publication() -> None:
    """A return's events keep their values; the histograms move at publication only."""
    registry = CollectorRegistry()
    m = AdapterMetrics(exporter=PrometheusExporter(registry), publish_interval_s=3600.0)
    m.publish()  # (the interval starts)
    m.decided("a", 1.0, ttl_s=30.0, pinned_blocks=7)
    m.arrived("a", "a2", 4.0, handed_over=False)  # missed: counted as reclaimed
    m.admitted("a", "a2", 4.5, hit_tokens=0)
    m.publish()  # within the interval
    assert sample(registry, "ttlpolicy_ttl_seconds_count") == 0
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 0
    m.publish(force=True)
    assert sample(registry, "ttlpolicy_ttl_seconds_bucket", le="20.0") == 0
    assert sample(registry, "ttlpolicy_ttl_seconds_bucket", le="30.0") == 1
    assert sample(registry, "ttlpolicy_tool_gap_seconds_sum") == 3.0
    assert sample(registry, "ttlpolicy_return_queue_wait_seconds_sum") == 0.5
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 1
    m.publish(force=True)  # published values are not observed twice
    assert sample(registry, "ttlpolicy_ttl_seconds_count") == 1


def test_a_client_histogram_laid_out_otherwise_is_observed_value_by_value() -> None:
    class Other:  # a client whose histogram keeps its buckets some other way
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, value: float) -> None:
            self.seen.append(value)

    exporter = PrometheusExporter(CollectorRegistry())
    other = Other()
    exporter.histograms["ttl_s"] = other
    assert not _batchable(other, METRICS["ttl_s"])
    exporter.batched = False
    exporter.observe("ttl_s", [2.0, 0.0])
    assert other.seen == [2.0, 0.0]


EVENT = st.one_of(
    st.tuples(st.just("arrive"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("admit"), st.integers(0, 3), st.integers(0, 50)),
    st.tuples(st.just("decide"), st.integers(0, 3), st.sampled_from([0.0, 2.0, 40.0])),
    st.tuples(st.just("pin"), st.integers(0, 3), st.sampled_from(["expired", "reclaimed"])),
    st.tuples(st.just("end"), st.integers(0, 3), st.none()),
    st.tuples(st.just("held"), st.integers(0, 3), st.none()),
    st.tuples(st.just("publish"), st.integers(0, 3), st.none()),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(EVENT, max_size=60), st.booleans())
def test_the_exported_counters_are_the_fields_and_returns_add_up(
    events: list[tuple[str, int, object]], pinned: bool
) -> None:
    registry = CollectorRegistry()
    m = AdapterMetrics(exporter=PrometheusExporter(registry), publish_interval_s=0.0)
    finished: set[str] = set()  # programs with a finished turn not yet back
    returns = 0
    for t, (kind, p, arg) in enumerate(events):
        pid, now = f"p{p}", float(t)
        if kind == "arrive":
            returns += pid in finished
            finished.discard(pid)
            m.arrived(pid, f"{pid}-{t}", now, handed_over=bool(arg))
        elif kind == "admit":
            m.admitted(pid, f"{pid}-{t - 1}", now, hit_tokens=int(arg))  # type: ignore[call-overload]
        elif kind == "decide":
            finished.add(pid)
            m.decided(pid, now, ttl_s=arg, pinned_blocks=3 if pinned and arg else None)  # type: ignore[arg-type]
        elif kind == "pin":
            m.pin_gone(pid, str(arg))
        elif kind == "end":
            finished.discard(pid)
            m.ended(pid)
        elif kind == "held":
            m.held_back(pid)
        else:
            m.publish()
    m.publish(force=True)
    missed = {c: getattr(m, f"returns_missed_{c}") for c in MISS_CAUSES}
    assert m.pins_handed_over + sum(missed.values()) == returns
    for cause in MISS_CAUSES:
        assert sample(registry, "ttlpolicy_returns_missed_total", cause=cause) == missed[cause]
    for key in ("pins", "expiries", "reclaims", "pinned_prefix_hits", "programs_ended"):
        assert sample(registry, METRICS[key].name + "_total") == getattr(m, key), key
    assert sample(registry, "ttlpolicy_tool_gap_seconds_count") == returns
    # no label outside the bounded sets, whatever the ids were
    for family in scrape(registry).values():
        for s in family.samples:  # type: ignore[attr-defined]
            for label, value in s.labels.items():
                assert label == "le" or value in BOUNDED_LABELS[label], (s.name, label, value)


def test_the_dict_and_log_keep_their_fields_and_hold_no_tracking_state() -> None:
    d = AdapterMetrics(exporter=object()).as_dict()
    assert "exporter" not in d and not any(k.startswith("_") for k in d)
    assert {"pins", "returns_missed_expired", "programs_ended", "working_set_blocks_now"} <= set(d)


def test_metrics_made_in_a_worker_process_reach_the_parent_in_multiprocess_mode(
    tmp_path: Path,
) -> None:
    """The path of vLLM's engine core and SGLang's scheduler: the adapter's process writes,
    the server process reads every process's files (``MultiProcessCollector``)."""
    child = textwrap.dedent(
        """
        from ttlpolicy.serving import AdapterMetrics, PrometheusExporter
        m = AdapterMetrics(pin_budget_blocks=40, exporter=PrometheusExporter())
        m.decided("p", 0.0, ttl_s=5.0, pinned_blocks=4)
        m.pin_gone("p", "reclaimed")
        m.arrived("p", "r", 2.0, handed_over=False)
        m.publish()
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", child], env=env, check=True, timeout=60)
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    assert sample(registry, "ttlpolicy_pins_total") == 1
    assert sample(registry, "ttlpolicy_returns_missed_total", cause="reclaimed") == 1
    assert sample(registry, "ttlpolicy_tool_gap_seconds_sum") == 2.0
    assert sample(registry, "ttlpolicy_pin_budget_blocks") == 40  # (livesum: until marked dead)


def test_ttlpolicy_imports_and_adapters_run_without_prometheus_client() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["prometheus_client"] = None  # not installed
        import ttlpolicy
        from ttlpolicy.serving import AdapterMetrics, exporter_or_none
        assert exporter_or_none(True) is None and exporter_or_none(False) is None
        m = AdapterMetrics(exporter=exporter_or_none(True))
        m.decided("p", 0.0, ttl_s=1.0, pinned_blocks=2)
        m.publish()
        assert m.pins == 1 and "prometheus_client" not in [k for k, v in sys.modules.items() if v]
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "prometheus_client is not installed" in out.stderr


def test_the_grafana_dashboard_reads_only_defined_metrics_and_has_the_operators_panels() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "grafana-ttlpolicy.json"
    dashboard = json.loads(path.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exposed = set()
    for spec in METRICS.values():
        suffixes = {
            "counter": ("_total",),
            "gauge": ("",),
            "histogram": ("_bucket", "_count", "_sum"),
        }
        exposed |= {spec.name + s for s in suffixes[spec.kind]}
    used = {name for e in exprs for name in re.findall(r"ttlpolicy_[a-z_]+", e)}
    assert used <= exposed, used - exposed
    titles = " | ".join(p["title"].lower() for p in dashboard["panels"])
    for needed in ("pinned memory vs budget", "hit rate", "reclaimed", "ttl", "admission queue"):
        assert needed in titles, needed
