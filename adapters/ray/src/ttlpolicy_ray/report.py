"""What a replica tells the router: its ttlpolicy state as Ray Serve routing stats.

Ray Serve's controller calls a deployment's ``record_routing_stats()`` every
``RequestRouterConfig.request_routing_stats_period_s`` and hands the dict it returns to every
router of the deployment (``RunningReplica.routing_stats``).  A replica running ttlpolicy puts
one entry there, under ``REPORT_KEY``, made by ``routing_stats``:

* the figures of ``ttlpolicy.ProgramRouter.report``: ``free_blocks``, ``total_blocks``,
  ``queue_len``, ``queued_tokens``, ``working_set_blocks``, ``cached_fraction``, and,
  optionally (both or neither), ``return_queue_len`` and ``return_queued_tokens``: the part
  of the queue a returning call of a program the replica serves waits behind (under
  program-level FCFS it runs ahead of new programs); left out, the router takes the whole
  queue;
* ``block_size`` (tokens per KV block: the router sizes a call's ``blocks_needed`` with it);
* ``pins``: the live pins, ``[program_id, remaining_s, blocks]``, longest-lived first, at most
  ``max_pins`` of them (``pins_left_out`` counts the rest).  A pin's *remaining* seconds, not
  its deadline: the router converts it to its own clock, so replica and router need not
  share one (``at``, the replica's wall time, tells the router how old the report is);
* ``evicted``: ``[program_id, held_blocks]`` for each program whose context the replica
  evicted, all but ``held_blocks`` of it (``ProgramRouter.evicted``), and has not rebuilt
  since (no call of the program came back to it), fewest held first, at most
  ``max_evicted`` of them (``evicted_left_out`` counts the rest).  A state, like the pins,
  not the evictions since the last report: Ray keeps only a replica's latest stats and a
  router reads them only when it routes, so an eviction listed in one report alone would be
  lost whenever the next report replaced it first.  Applying one twice changes nothing;
  the router ignores it for a program routed since the report was taken;
* ``seq``: counts the reports of this replica; the router applies each report once (a report
  it applied undoes the router's own count of the calls it sent since).

``REPORT_VERSION`` stays 1: the return queue and ``evicted`` are optional additions (a
router that predates them ignores them; a report without them gets the router's defaults),
and the router ignores a report of another version whole, so bumping it would only blind
a router to replicas upgraded before it (or after it) during a rolling update.

``ReplicaReport`` declares the entry's fields once, for ``routing_stats``, which writes it,
and the router, which reads it.

Two sources of the figures, both thin readers (no rule of the model is restated here):
``lifecycle_stats`` reads a ``ttlpolicy.ProgramScheduler`` (the pin table every adapter's
``ProgramLifecycle`` holds) plus the engine's own figures (return queue and evictions
included); ``vllm_scheduler_stats`` reads a ``ttlpolicy_vllm.TTLScheduler`` in the same
process, with ``VllmEvictions`` as its eviction source.  ``RoutingStatsMixin`` gives a Serve
deployment the ``record_routing_stats`` method.

This module does not import Ray: a replica's engine process may build its report without it.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from ttlpolicy.ids import tenant_of

__all__ = [
    "DEFAULT_MAX_CONTEXTS",
    "DEFAULT_MAX_EVICTED",
    "DEFAULT_MAX_PINS",
    "REPORT_KEY",
    "REPORT_VERSION",
    "ReplicaReport",
    "RoutingStatsMixin",
    "VllmEvictions",
    "lifecycle_stats",
    "routing_stats",
    "vllm_scheduler_stats",
]

#: The key of ttlpolicy's entry in a replica's routing stats.
REPORT_KEY = "ttlpolicy"
#: The entry's layout version (the router ignores entries of another version).
REPORT_VERSION = 1
#: Pins listed per report by default (Ray ships the dict to every router each period).
DEFAULT_MAX_PINS = 4096
#: Evictions listed per report by default (likewise).
DEFAULT_MAX_EVICTED = 4096
#: Programs whose last context ``VllmEvictions`` watches, by default.
DEFAULT_MAX_CONTEXTS = 4096


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """ttlpolicy's entry in a replica's routing stats, field by field: one declaration of
    the layout (module doc) for ``routing_stats``, which writes it, and the router, which
    reads it (``read``: attributes for a dict's keys, so a misspelt field fails loudly).

    Each field is as sent, None where absent: nothing is checked here — the router checks
    the version and the block size, ``ttlpolicy.ProgramRouter`` the figures, and refuses a
    report, or an entry, it cannot use.  The annotations say what ``routing_stats`` writes;
    a replica may send anything."""

    v: int | None = None
    seq: int | None = None
    #: The replica's wall time when it made the report (the router ages the pins by it).
    at: float | None = None
    free_blocks: int | None = None
    total_blocks: int | None = None
    queue_len: int | None = None
    queued_tokens: int | None = None
    working_set_blocks: int | None = None
    cached_fraction: float | None = None
    #: Tokens per KV block (the router sizes calls with it).
    block_size: int | None = None
    #: ``[program_id, remaining_s, blocks]``, longest-lived first.
    pins: list[Any] | None = None
    pins_left_out: int | None = None
    #: ``[program_id, held_blocks]``, fewest held first.
    evicted: list[Any] | None = None
    evicted_left_out: int | None = None
    #: Optional, both or neither: the queue a returning call waits behind.
    return_queue_len: int | None = None
    return_queued_tokens: int | None = None

    @classmethod
    def read(cls, stats: object) -> ReplicaReport | None:
        """The entry of a replica's routing stats (None: it has none — not reported yet,
        or not a ttlpolicy replica); keys that name no field are left out."""
        entry = stats.get(REPORT_KEY) if isinstance(stats, dict) else None
        if not isinstance(entry, dict):
            return None
        return cls(**{name: entry.get(name) for name in REPORT_FIELDS})

    def entry(self) -> dict[str, Any]:
        """The entry as sent: every field but those that are None."""
        return {n: v for n in REPORT_FIELDS if (v := getattr(self, n)) is not None}


#: ``ReplicaReport``'s fields: the keys of a report's entry.
REPORT_FIELDS = tuple(f.name for f in fields(ReplicaReport))


def routing_stats(
    *,
    seq: int,
    free_blocks: int,
    total_blocks: int,
    queue_len: int,
    queued_tokens: int,
    working_set_blocks: int,
    cached_fraction: float,
    block_size: int,
    return_queue_len: int | None = None,
    return_queued_tokens: int | None = None,
    pins: Iterable[tuple[str, float, int]] = (),
    max_pins: int = DEFAULT_MAX_PINS,
    evicted: Iterable[tuple[str, int]] = (),
    max_evicted: int = DEFAULT_MAX_EVICTED,
    at: float | None = None,
) -> dict[str, Any]:
    """The routing-stats dict of one report (``{REPORT_KEY: {...}}``).  ``pins``: (program id,
    remaining seconds, blocks); those with no time left are left out, the rest sorted
    longest-lived first and cut at ``max_pins``.  ``return_queue_len`` and
    ``return_queued_tokens``: left out of the entry when None.  ``evicted``: (program id,
    held blocks): the programs whose context the replica evicted and has not rebuilt, one
    per program (the last given wins), sorted fewest held first and cut at
    ``max_evicted``.  A cut takes each tenant's entries in turn (``tenants_in_turn``), so a
    tenant with thousands cannot push another's out of the report.  The figures are passed
    as given: the router validates them (``ProgramRouter.report``, ``evicted``) and ignores
    a report, or an entry, it refuses."""
    live = sorted(
        ((pid, float(left), int(blocks)) for pid, left, blocks in pins if left > 0.0),
        key=lambda p: (-p[1], p[0]),
    )
    gone = sorted(dict(evicted).items(), key=lambda e: (e[1], e[0]))
    live_kept, gone_kept = tenants_in_turn(live, max_pins), tenants_in_turn(gone, max_evicted)
    entry = ReplicaReport(
        v=REPORT_VERSION,
        seq=seq,
        at=time.time() if at is None else at,
        free_blocks=free_blocks,
        total_blocks=total_blocks,
        queue_len=queue_len,
        queued_tokens=queued_tokens,
        working_set_blocks=working_set_blocks,
        cached_fraction=cached_fraction,
        block_size=block_size,
        pins=[list(p) for p in live_kept],
        pins_left_out=len(live) - len(live_kept),
        evicted=[list(e) for e in gone_kept],
        evicted_left_out=len(gone) - len(gone_kept),
        return_queue_len=return_queue_len,
        return_queued_tokens=return_queued_tokens,
    ).entry()
    return {REPORT_KEY: entry}


def tenants_in_turn(entries: list[Any], limit: int) -> list[Any]:
    """At most ``limit`` of ``entries`` (each led by a program id, in the report's order),
    taken one per tenant in turn (``ttlpolicy.ids.tenant_of``; tenants in the order of their
    first entry), each tenant's in their order: all of them when they fit."""
    if len(entries) <= limit:
        return entries
    by_tenant: dict[str, deque[Any]] = {}
    for entry in entries:
        by_tenant.setdefault(tenant_of(str(entry[0])), deque()).append(entry)
    turn, kept = list(by_tenant.values()), list[Any]()
    while turn and len(kept) < limit:
        for queue in turn[: limit - len(kept)]:
            kept.append(queue.popleft())
        turn = [queue for queue in turn if queue]
    return kept


def lifecycle_stats(
    scheduler: Any, now: float, *, max_pins: int = DEFAULT_MAX_PINS, **figures: Any
) -> dict[str, Any]:
    """``routing_stats`` (``figures``: its other keyword arguments, the engine's own: the
    return queue and ``evicted`` among them when the engine knows them) with the pins of
    ``scheduler`` (a ``ttlpolicy.ProgramScheduler``, e.g. ``ProgramLifecycle.scheduler``) as of
    ``now`` on its clock."""
    pins = [(p.program_id, p.deadline_s - now, p.blocks) for p in scheduler.pins()]
    return routing_stats(pins=pins, max_pins=max_pins, **figures)


class VllmEvictions:
    """The programs whose last context a ``ttlpolicy_vllm.TTLScheduler``'s prefix cache
    evicted (and no call rebuilt since): the eviction source of ``vllm_scheduler_stats``.
    One per scheduler, kept by the caller across reports.

    Each call, every live request (``scheduler.requests``) of a named program, not its last
    turn, gives its program's context: the request's block hashes (vLLM's
    ``Request.block_hashes``, its full blocks).  A program with no live request is away:
    its context is *held* up to its first block no longer in the prefix cache
    (``BlockPool.get_cached_block``, KV cache group 0), as the program's next call would
    find it.  Returns ``(program_id, held_blocks)`` for every watched program holding less
    than its whole context.  A program leaves the list when a request of it is live again
    (that request rebuilds its context) or when it ended (its last turn was seen, or load
    control forgot it, when there is load control).  A pinned context is never listed:
    vLLM does not evict referenced blocks, so only once its pin expired or was reclaimed.

    What it does not see: a call that started and finished between two calls of this
    (its program's context is then the last one seen, a prefix of the new one: the held
    count is still where the program's prefix breaks, but blocks only that call added are
    not watched), and a program none of whose calls it saw live.  At most
    ``max_contexts`` programs are watched, the least recently live forgotten first; a call
    costs one hash lookup per held block watched."""

    def __init__(self, max_contexts: int = DEFAULT_MAX_CONTEXTS) -> None:
        if type(max_contexts) is not int or max_contexts < 1:
            raise ValueError(f"max_contexts must be an int >= 1, got {max_contexts!r}")
        self.max_contexts = max_contexts
        # program -> (its context's block hashes, how many of them were held at the last
        # look); the hashes are dropped once none is held
        self._contexts: OrderedDict[str, tuple[tuple[Any, ...], int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._contexts)

    def __call__(self, scheduler: Any) -> list[tuple[str, int]]:
        pool = scheduler.kv_cache_manager.block_pool
        live: dict[str, tuple[Any, ...]] = {}
        ended: set[str] = set()
        for request in list(scheduler.requests.values()):
            # (the scheduler's own: its tenancy, client ids and inferred programs)
            info = scheduler.program_of_request(request.request_id)
            if info is None:
                continue
            if info.last_turn:
                ended.add(info.program_id)
                continue
            hashes = tuple(request.block_hashes)
            if len(hashes) >= len(live.get(info.program_id, ())):
                live[info.program_id] = hashes
        admission = scheduler.admission
        out: list[tuple[str, int]] = []
        for pid, (hashes, held, length) in list(self._contexts.items()):
            if pid in ended or (admission is not None and not admission.knows(pid)):
                del self._contexts[pid]  # ended: no next call to route
                continue
            if pid in live:
                continue
            if held:
                now_held = 0
                for h in hashes[:held]:
                    if pool.get_cached_block(h, [0]) is None:
                        break
                    now_held += 1
                if now_held < held:
                    held = now_held
                    self._contexts[pid] = (hashes if held else (), held, length)
            if held < length:
                out.append((pid, held))
        for pid, hashes in live.items():
            self._contexts[pid] = (hashes, len(hashes), len(hashes))
            self._contexts.move_to_end(pid)
        while len(self._contexts) > self.max_contexts:
            self._contexts.popitem(last=False)
        return out


def vllm_scheduler_stats(
    scheduler: Any,
    *,
    seq: int,
    max_pins: int = DEFAULT_MAX_PINS,
    evictions: VllmEvictions | None = None,
    max_evicted: int = DEFAULT_MAX_EVICTED,
) -> dict[str, Any]:
    """The report of a ``ttlpolicy_vllm.TTLScheduler`` living in this process (vLLM with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; by default vLLM runs its scheduler in an engine-core
    subprocess, out of a Serve replica's reach: see docs/ray.md).  Reads: the block pool's free
    blocks, ``total_blocks``, the waiting queue and its prompt tokens not yet computed, load
    control's working set (else the blocks in use), the share of returning calls that found
    their pin (the adapter's counters) and the pin table.  With load control on, the return
    queue: the waiting requests of programs it admitted (``AdmissionControl.admitted``) —
    admitted programs arrived before every program it holds back, so program-level FCFS
    runs their calls first — and their uncomputed prompt tokens; with it off, none is
    reported (the router takes the whole queue).  ``evictions``: the scheduler's
    ``VllmEvictions`` (kept across reports), which lists the evicted contexts; None: no
    ``evicted`` list."""
    now = scheduler.clock()
    total = int(scheduler.total_blocks)
    free = min(total, int(scheduler.kv_cache_manager.block_pool.get_num_free_blocks()))
    waiting = list(scheduler.waiting)
    uncomputed = [max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in waiting]
    admission = scheduler.admission
    returns: tuple[int, int] | None = None
    if admission is not None and scheduler.policy.config.admission:
        working = int(admission.working_set_blocks(now))
        n = tokens = 0
        for request, left in zip(waiting, uncomputed, strict=True):
            info = scheduler.program_of_request(request.request_id)
            if info is not None and admission.admitted(info.program_id):
                n += 1
                tokens += left
        returns = (n, tokens)
    else:
        working = total - free
    m = scheduler.ttl_metrics
    missed = (
        m.returns_missed_expired
        + m.returns_missed_reclaimed
        + m.returns_missed_not_pinned
        + m.returns_missed_budget_full
    )
    returned = m.pins_handed_over + missed
    cached = m.pins_handed_over / returned if returned else 1.0
    return lifecycle_stats(
        scheduler.programs,
        now,
        seq=seq,
        free_blocks=free,
        total_blocks=total,
        queue_len=len(waiting),
        queued_tokens=sum(uncomputed),
        return_queue_len=None if returns is None else returns[0],
        return_queued_tokens=None if returns is None else returns[1],
        working_set_blocks=min(total, working),
        cached_fraction=cached,
        block_size=int(scheduler.block_size),
        max_pins=max_pins,
        evicted=evictions(scheduler) if evictions is not None else (),
        max_evicted=max_evicted,
    )


class RoutingStatsMixin:
    """Gives a Serve deployment class ``record_routing_stats`` (Ray calls it by that name):
    the class defines ``ttlpolicy_routing_stats(seq) -> dict`` (``lifecycle_stats`` or
    ``vllm_scheduler_stats``, with a ``VllmEvictions`` the class keeps); the mixin numbers
    the reports.  Should it raise, Ray logs the
    error and its routers keep the replica's last report."""

    _ttlpolicy_seq = 0
    ttlpolicy_routing_stats: Callable[[int], dict[str, Any]]

    def record_routing_stats(self) -> dict[str, Any]:
        self._ttlpolicy_seq += 1
        return self.ttlpolicy_routing_stats(self._ttlpolicy_seq)
