"""Counters of what an engine adapter did, and its own cost per scheduling step.

One definition for both adapters (vLLM's ``TTLScheduler.ttl_stats()``, SGLang's
``TTLRadixCache.ttl_stats()``), in the library's units: KV blocks (SGLang: pages), tokens,
seconds.  Logged through the engine's logger every ``log_interval_s`` and on demand, and, with
an ``exporter`` (``ttlpolicy.serving.prometheus``), exported as Prometheus metrics: ``publish``
moves the exporter's counters by what the fields gained and sets its gauges; the events
(``arrived``, ``admitted``, ``decided``, ``pin_gone``, ``ended``, ``held_back``) update the fields
and keep the histograms' values, which ``publish`` observes in one batch: the events touch no
``prometheus_client`` object, so a return costs the same with an exporter as without (the
client's lock and, in multiprocess mode, file write per bucket made them the metrics' main
cost per step, docs/investigations/metrics-overhead.md).  The adapters call the events where
the lifecycle answers them.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Any

from .prometheus import HISTOGRAMS, MISSED_FIELDS

#: Programs (and returning requests) remembered for a return's cause, gap and queue wait; the
#: oldest are forgotten beyond it, as the ProgramScheduler forgets idle programs.
MAX_TRACKED = 1 << 16
#: Seconds between two publications to the exporter (unless forced) ...
PUBLISH_INTERVAL_S = 0.5
#: ... and scheduling steps between them, up to ``PUBLISH_STALE_INTERVALS`` intervals (4 s):
#: a publication costs ~15 us in a tight loop and ~50 us inside an engine (cold caches), one
#: each 0.5 s came every 4 steps of 120 ms on a loaded machine; with the floor no step pays
#: more than ~1 us of it (docs/investigations/metrics-overhead.md), and a scrape every 5-15 s
#: still reads figures at most 4 s old.
PUBLISH_MIN_STEPS = 64
PUBLISH_STALE_INTERVALS = 8


@dataclass
class AdapterMetrics:
    pins: int = 0  # finished requests whose cached prefix was pinned
    pinned_blocks_total: int = 0  # blocks pinned, summed over pins
    expiries: int = 0  # pins released at their deadline
    reclaims: int = 0  # pins (or held chains) released early: memory was short
    released_at_once: int = 0  # pins released by abort, last turn or end of program
    pinned_prefix_hits: int = 0  # returning requests admitted onto their program's pin
    pinned_prefix_hit_tokens: int = 0  # tokens those requests found held for them
    schedule_calls: int = 0  # scheduling steps (vLLM: schedule(); SGLang: queue orderings)
    adapter_s: float = 0.0  # time in the adapter's own code, all calls
    engine_s: float = 0.0  # time in the engine's own scheduling code the adapter wraps
    pinned_blocks_now: int = 0  # gauge, refreshed each step
    offloaded_tokens_at_finish: int = 0  # prefix tokens an offload tier held at finish
    admitted_programs_now: int = 0  # gauge: programs admitted by load control
    programs_awaiting_admission_now: int = 0  # gauge: programs it holds back
    free_blocks_reordered: int = 0  # free cached blocks moved into next-use eviction order
    pins_handed_over: int = 0  # returning requests that arrived to their program's pin
    returns_missed_expired: int = 0  # returns whose program's pin had expired
    returns_missed_reclaimed: int = 0  # ... had been reclaimed under memory pressure
    returns_missed_not_pinned: int = 0  # ... whose last turn got TTL 0
    returns_missed_budget_full: int = 0  # ... whose pin did not fit the pin budget
    programs_ended: int = 0  # programs ended: last turn, abort, end of program
    admission_refusals: int = 0  # programs held back by load control, once per wait
    calls_linked: int = 0  # calls without an id linked to a program from their prompt
    calls_forked: int = 0  # ... linked as a fork of a program with a call running
    calls_new_program: int = 0  # ... that started a new program (nothing matched)
    contexts_superseded: int = 0  # pins released: the program's call did not continue them
    queue_skips: int = 0  # requests run past a queue head too large for memory (skip_ahead)
    pinned_programs_now: int = 0  # gauge: programs holding a pin
    working_set_blocks_now: int = 0  # gauge: load control's working set
    pin_budget_blocks: int = 0  # the engine's pin budget (constant)
    total_blocks: int = 0  # the engine's KV pool (constant)
    exporter: Any = field(default=None, repr=False, compare=False)  # a PrometheusExporter
    publish_interval_s: float = field(default=PUBLISH_INTERVAL_S, repr=False)
    # program -> (finished at s, what became of its pin: a miss cause or "pinned")
    _programs: OrderedDict[str, tuple[float, str]] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )
    _returning: OrderedDict[str, float] = field(  # returning request -> arrived at s
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )
    _held_back: OrderedDict[str, None] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )
    _published: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _published_at: tuple[float, int] = field(  # (monotonic s, schedule_calls) of the last
        default=(-math.inf, 0), init=False, repr=False, compare=False
    )
    # histogram values since the last publication, by METRICS key (kept with an exporter only)
    _observed: dict[str, list[float]] = field(
        default_factory=lambda: {key: [] for key in HISTOGRAMS},
        init=False,
        repr=False,
        compare=False,
    )

    @property
    def adapter_us_per_schedule(self) -> float:
        return 1e6 * self.adapter_s / self.schedule_calls if self.schedule_calls else 0.0

    def as_dict(self) -> dict[str, float]:
        d: dict[str, float] = {k: getattr(self, k) for k in _FIELDS}
        d["adapter_us_per_schedule"] = self.adapter_us_per_schedule
        return d

    def fresh(self) -> AdapterMetrics:
        """Counters from zero with the same exporter and engine constants (a benchmark that
        counts its replay only); the exporter's counters keep rising from where they are."""
        return AdapterMetrics(
            pin_budget_blocks=self.pin_budget_blocks,
            total_blocks=self.total_blocks,
            exporter=self.exporter,
            publish_interval_s=self.publish_interval_s,
        )

    # -- events (the adapters call them where the lifecycle answered) ------------------------
    def decided(
        self, program_id: str, now_s: float, ttl_s: float | None, pinned_blocks: int | None
    ) -> None:
        """A request of ``program_id`` finished, not its last: the policy chose ``ttl_s``
        (None: no decision), and the engine pinned ``pinned_blocks`` (None: no pin)."""
        if pinned_blocks is not None:
            self.pins += 1
            self.pinned_blocks_total += pinned_blocks
            fate = "pinned"
        else:
            fate = "budget_full" if ttl_s is not None and ttl_s > 0.0 else "not_pinned"
        _remember(self._programs, program_id, (now_s, fate))
        if self.exporter is not None and ttl_s is not None:
            self._observed["ttl_s"].append(ttl_s)

    def pin_gone(self, program_id: str, cause: str) -> None:
        """The program's pin was released: ``expired`` or ``reclaimed`` (a miss cause its next
        request will carry)."""
        if cause == "expired":
            self.expiries += 1
        elif cause == "reclaimed":
            self.reclaims += 1
        else:
            raise ValueError(f"cause must be 'expired' or 'reclaimed', got {cause!r}")
        last = self._programs.get(program_id)
        if last is not None:
            self._programs[program_id] = (last[0], cause)

    def arrived(self, program_id: str, request_key: str, now_s: float, handed_over: bool) -> None:
        """A request of ``program_id`` arrived; ``handed_over``: its program's pin is its own.
        A request of a program with a finished turn is a return: its gap is observed, and
        it hits its pin or misses it by the cause the pin met."""
        last = self._programs.pop(program_id, None)
        if last is None:
            return  # a first request (or one of a program forgotten since)
        finished_at_s, fate = last
        if handed_over:
            self.pins_handed_over += 1
        elif fate == "pinned":
            # released by a path not reported as expiry or reclaim: counted as reclaimed
            fate = "reclaimed"
        if not handed_over:
            name = MISSED_FIELDS[fate]
            setattr(self, name, getattr(self, name) + 1)
        _remember(self._returning, request_key, now_s)
        if self.exporter is not None:
            self._observed["tool_gap_s"].append(max(0.0, now_s - finished_at_s))

    def admitted(self, program_id: str, request_key: str, now_s: float, hit_tokens: int) -> None:
        """The request was admitted (``hit_tokens``: tokens of its program's pin it took over;
        0: none).  A return's queue wait is observed."""
        self._held_back.pop(program_id, None)
        if hit_tokens > 0:
            self.pinned_prefix_hits += 1
            self.pinned_prefix_hit_tokens += hit_tokens
        arrived_s = self._returning.pop(request_key, None)
        if arrived_s is not None and self.exporter is not None:
            self._observed["return_wait_s"].append(max(0.0, now_s - arrived_s))

    def gone(self, request_key: str) -> None:
        """The request left without being admitted (aborted, dropped with its program)."""
        self._returning.pop(request_key, None)

    def ended(self, program_id: str) -> None:
        """The program ended (its pin, if any, was released at once by the caller)."""
        self.programs_ended += 1
        self._programs.pop(program_id, None)
        self._held_back.pop(program_id, None)

    def held_back(self, program_id: str) -> None:
        """Load control refused the program now; counted once until it is admitted."""
        if program_id not in self._held_back:
            self.admission_refusals += 1
            _remember(self._held_back, program_id, None)

    def publish_due(self) -> bool:
        """Whether ``publish`` would publish now (a figure costly to read is read then only):
        ``publish_interval_s`` passed since the last publication, and ``PUBLISH_MIN_STEPS``
        steps or ``PUBLISH_STALE_INTERVALS`` intervals."""
        if self.exporter is None:
            return False
        last_s, last_calls = self._published_at
        elapsed_s = time.monotonic() - last_s
        return elapsed_s >= self.publish_interval_s and (
            self.schedule_calls - last_calls >= PUBLISH_MIN_STEPS
            or elapsed_s >= PUBLISH_STALE_INTERVALS * self.publish_interval_s
        )

    def publish(self, force: bool = False) -> None:
        """Move the exporter's counters by what the fields gained since the last publication,
        set the gauges that changed and observe the histograms' values kept since: when
        ``publish_due`` (the adapters call it at each step; the client's updates cost
        microseconds each, docs/investigations/metrics-overhead.md, and a scrape every few
        seconds needs no fresher figure), and whenever ``force`` (the engine goes idle: no
        later step would publish)."""
        x = self.exporter
        if x is None or not (force or self.publish_due()):
            return
        self._published_at = (time.monotonic(), self.schedule_calls)
        seen = self._published
        for key, counter in x.counters.items():
            value = getattr(self, key)
            gained = value - seen.get(key, 0)
            if gained > 0:
                counter.inc(gained)
                seen[key] = value
        for key, gauge in x.gauges.items():
            value = getattr(self, key)
            if seen.get(key) != value:
                gauge.set(value)
                seen[key] = value
        for key, values in self._observed.items():
            if values:
                x.observe(key, values)
                values.clear()

    def log(self, logger: logging.Logger) -> None:
        logger.info(
            "ttlpolicy: pins=%d (blocks now %d) expiries=%d reclaims=%d released=%d "
            "pinned-prefix hits=%d (%d tokens) admitted programs=%d awaiting admission=%d "
            "adapter %.1f us/schedule over %d calls",
            self.pins,
            self.pinned_blocks_now,
            self.expiries,
            self.reclaims,
            self.released_at_once,
            self.pinned_prefix_hits,
            self.pinned_prefix_hit_tokens,
            self.admitted_programs_now,
            self.programs_awaiting_admission_now,
            self.adapter_us_per_schedule,
            self.schedule_calls,
        )


#: The counters and gauges ``as_dict`` returns (the tracking state and the exporter are not).
_FIELDS = tuple(f.name for f in fields(AdapterMetrics) if f.repr and f.name != "exporter")


def _remember(table: OrderedDict[str, Any], key: str, value: Any) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > MAX_TRACKED:
        table.popitem(last=False)
