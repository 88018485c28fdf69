"""The adapters' Prometheus metrics: one table of names, types, help texts and labels
(``METRICS``), and the exporter that ``AdapterMetrics`` drives (``PrometheusExporter``).

``prometheus_client`` is an optional dependency of the adapters (their ``metrics`` extra),
never of the core: it is imported when an exporter is built, not with ``ttlpolicy``.

Where the figures appear: the metrics are created in the process that runs the adapter
(vLLM's engine core, SGLang's scheduler).  Both engines read their processes' metrics through
``prometheus_client``'s multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` is set (SGLang sets
it with ``--enable-metrics``; for vLLM see docs/vllm.md), so gauges are summed over live
processes (``livesum``: one engine per data-parallel rank, each with its own KV pool).

Labels are bounded: the only one is ``cause`` on missed returns, from ``MISS_CAUSES``; no
program or request id ever becomes a label value.
"""

from __future__ import annotations

import logging
import weakref
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

#: Why a returning request found no pin of its program (label ``cause``):
#: ``expired`` its pin reached its deadline, ``reclaimed`` it gave way to memory pressure,
#: ``not_pinned`` the policy chose no TTL (TTL 0), ``budget_full`` it chose one but the pin
#: budget had no room.
MISS_CAUSES = ("expired", "reclaimed", "not_pinned", "budget_full")

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its ``name`` as exposed (counters without the ``_total`` the client adds),
    ``kind``, ``help`` text, ``labels`` (bounded sets only) and histogram ``buckets``."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


# Buckets: a TTL is 0 (not pinned) up to max_ttl_s (default 120 s); tool gaps span
# sub-second calls to minutes-long builds; queue waits of returning calls are one engine
# step (~10 ms) to minutes under overload.
TTL_BUCKETS_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
GAP_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
WAIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

P = "ttlpolicy_"
#: Every metric, by the ``AdapterMetrics`` field (or event) that feeds it.
METRICS: dict[str, MetricSpec] = {
    # counters, fed from AdapterMetrics' fields of the same meaning
    "pins": MetricSpec(P + "pins", "counter", "Finished requests whose cached prefix was pinned."),
    "pinned_blocks_total": MetricSpec(
        P + "pin_blocks", "counter", "KV blocks (SGLang: pages) pinned, summed over pins."
    ),
    "pins_handed_over": MetricSpec(
        P + "pins_handed_over",
        "counter",
        "Returning requests that arrived while their program held a pin (the pin is theirs).",
    ),
    "expiries": MetricSpec(
        P + "pins_expired", "counter", "Pins released at their deadline (TTL ran out)."
    ),
    "reclaims": MetricSpec(
        P + "pins_reclaimed",
        "counter",
        "Pins, or prefixes held for waiting requests, released early: memory was short.",
    ),
    "released_at_once": MetricSpec(
        P + "pins_released",
        "counter",
        "Pins released because their program ended (last turn, abort).",
    ),
    "pinned_prefix_hits": MetricSpec(
        P + "returns_hit", "counter", "Returning requests admitted onto their program's pin."
    ),
    "pinned_prefix_hit_tokens": MetricSpec(
        P + "returns_hit_tokens", "counter", "Tokens the returning requests found pinned for them."
    ),
    "returns_missed": MetricSpec(
        P + "returns_missed",
        "counter",
        "Returning requests that found no pin of their program, by cause.",
        labels=("cause",),
    ),
    "calls_linked": MetricSpec(
        P + "calls_linked",
        "counter",
        "Calls that named no program, linked to one from their prompt (program inference).",
    ),
    "calls_forked": MetricSpec(
        P + "calls_forked",
        "counter",
        "Calls that named no program, linked as a fork of a program with a call running.",
    ),
    "calls_new_program": MetricSpec(
        P + "calls_new_program",
        "counter",
        "Calls that named no program and matched none: each started a new program.",
    ),
    "contexts_superseded": MetricSpec(
        P + "contexts_superseded",
        "counter",
        "Pins released at once because their program's new call did not continue them"
        " (compaction, an edited history, a retry from an earlier point).",
    ),
    "queue_skips": MetricSpec(
        P + "queue_skips",
        "counter",
        "Requests run past a queue head whose whole prompt did not fit the free memory"
        " (the first of the next few that fit: TTLPOLICY_SKIP_DEPTH).",
    ),
    "programs_ended": MetricSpec(
        P + "programs_ended", "counter", "Programs ended (last turn, abort, end of program)."
    ),
    "admission_refusals": MetricSpec(
        P + "admission_refusals",
        "counter",
        "Programs held back by load control (working-set rule), counted once per wait.",
    ),
    "schedule_calls": MetricSpec(
        P + "schedule_calls",
        "counter",
        "Scheduling steps (vLLM: schedule(); SGLang: queue orderings).",
    ),
    "adapter_s": MetricSpec(
        P + "adapter_seconds", "counter", "Time spent in the adapter's own code, all calls."
    ),
    # gauges, refreshed at each scheduling step
    "pinned_blocks_now": MetricSpec(
        P + "pinned_blocks", "gauge", "KV blocks (SGLang: pages) held by pins now."
    ),
    "pin_budget_blocks": MetricSpec(
        P + "pin_budget_blocks", "gauge", "The most KV blocks (SGLang: pages) pins may hold."
    ),
    "total_blocks": MetricSpec(
        P + "kv_blocks", "gauge", "KV blocks (SGLang: pages) of the engine's cache pool."
    ),
    "pinned_programs_now": MetricSpec(
        P + "pinned_programs", "gauge", "Programs holding a pin now."
    ),
    "admitted_programs_now": MetricSpec(
        P + "admitted_programs", "gauge", "Programs admitted by load control now."
    ),
    "programs_awaiting_admission_now": MetricSpec(
        P + "programs_awaiting_admission", "gauge", "Programs load control holds back now."
    ),
    "working_set_blocks_now": MetricSpec(
        P + "working_set_blocks",
        "gauge",
        "KV blocks (SGLang: pages) of the admitted programs expected back soon (load control).",
    ),
    # histograms, fed by events
    "ttl_s": MetricSpec(
        P + "ttl_seconds",
        "histogram",
        "TTL the policy chose for a finished request (0: not pinned).",
        buckets=TTL_BUCKETS_S,
    ),
    "tool_gap_s": MetricSpec(
        P + "tool_gap_seconds",
        "histogram",
        "Time from a program's finished request to its next request (the tool call's gap).",
        buckets=GAP_BUCKETS_S,
    ),
    "return_wait_s": MetricSpec(
        P + "return_queue_wait_seconds",
        "histogram",
        "Time a returning request waited in the queue before it was admitted.",
        buckets=WAIT_BUCKETS_S,
    ),
}

COUNTERS = tuple(k for k, s in METRICS.items() if s.kind == "counter" and not s.labels)
GAUGES = tuple(k for k, s in METRICS.items() if s.kind == "gauge")
HISTOGRAMS = tuple(k for k, s in METRICS.items() if s.kind == "histogram")
#: The ``AdapterMetrics`` field that counts each cause of a missed return.
MISSED_FIELDS = {cause: "returns_missed_" + cause for cause in MISS_CAUSES}

# One set of client objects per registry: a second exporter in a process (two engines, tests)
# shares them, as the client refuses a name registered twice.
_BUILT: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _build(registry: Any) -> dict[str, Any]:
    import prometheus_client as pc

    objects: dict[str, Any] = {}
    for key, spec in METRICS.items():
        common: dict[str, Any] = {"labelnames": spec.labels, "registry": registry}
        if spec.kind == "counter":
            objects[key] = pc.Counter(spec.name, spec.help, **common)
        elif spec.kind == "gauge":
            # summed over live processes: one engine per data-parallel rank
            objects[key] = pc.Gauge(spec.name, spec.help, multiprocess_mode="livesum", **common)
        else:
            objects[key] = pc.Histogram(spec.name, spec.help, buckets=spec.buckets, **common)
    return objects


class PrometheusExporter:
    """The ``prometheus_client`` objects of ``METRICS`` in ``registry`` (default: the
    client's global registry, which the engines' ``/metrics`` serves, or, in multiprocess
    mode, its files).  ``AdapterMetrics.publish`` moves the counters by what its fields
    gained since the last call and sets the gauges; its events observe the histograms."""

    def __init__(self, registry: Any = None) -> None:
        if registry is None:
            import prometheus_client

            registry = prometheus_client.REGISTRY
        built = _BUILT.get(registry)
        if built is None:
            built = _BUILT[registry] = _build(registry)
        self.objects = built
        self.missed = {cause: built["returns_missed"].labels(cause=cause) for cause in MISS_CAUSES}
        # AdapterMetrics field -> client counter (a missed return's cause: its labelled child)
        self.counters = {key: built[key] for key in COUNTERS}
        self.counters.update({MISSED_FIELDS[c]: child for c, child in self.missed.items()})
        self.gauges = {key: built[key] for key in GAUGES}
        self.histograms = {key: built[key] for key in HISTOGRAMS}
        self.batched = all(_batchable(built[key], METRICS[key]) for key in HISTOGRAMS)

    def observe(self, key: str, values: Sequence[float]) -> None:
        """Add ``values`` to histogram ``key`` (one of ``HISTOGRAMS``): as one increment of
        each bucket they fall in and one of the sum (the client's ``observe`` takes a lock and
        a file write, in multiprocess mode, per bucket and sum: per value, that was most of the
        metrics' cost per step, docs/investigations/metrics-overhead.md); one ``observe`` per
        value where the client's histogram is not laid out as checked (``batched``)."""
        histogram = self.histograms[key]
        if not self.batched:
            for value in values:
                histogram.observe(value)
            return
        counts: dict[int, int] = {}
        bounds = histogram._upper_bounds
        for value in values:
            i = bisect_left(bounds, value)  # the first bucket with value <= its bound
            counts[i] = counts.get(i, 0) + 1
        buckets = histogram._buckets
        for i, n in counts.items():
            buckets[i].inc(n)
        histogram._sum.inc(sum(values))


def _batchable(histogram: Any, spec: MetricSpec) -> bool:
    """Whether the client's histogram keeps what ``observe`` batches the way the client's
    own ``observe`` moves it (as in ``prometheus_client`` 0.26): one value per bucket bound,
    the spec's bounds and +Inf, and a sum, each with ``inc``."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    return (
        isinstance(bounds, list)
        and bounds == [*spec.buckets, float("inf")]
        and isinstance(buckets, list)
        and len(buckets) == len(bounds)
        and all(hasattr(b, "inc") for b in buckets)
        and hasattr(total, "inc")
    )


def exporter_or_none(enabled: bool, registry: Any = None) -> PrometheusExporter | None:
    """An exporter when ``enabled`` and ``prometheus_client`` is installed, else None (the
    adapters then keep their counters and log line only)."""
    if not enabled:
        return None
    try:
        return PrometheusExporter(registry)
    except ImportError:
        logging.getLogger(__name__).warning(
            "ttlpolicy: prometheus_client is not installed: no ttlpolicy_* metrics "
            "(pip install 'ttlpolicy-vllm[metrics]' or 'ttlpolicy-sglang[metrics]')"
        )
        return None
