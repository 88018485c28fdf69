"""What a replica tells the router: its ttlpolicy state as Ray Serve routing stats.

Ray Serve's controller calls a deployment's ``record_routing_stats()`` every
``RequestRouterConfig.request_routing_stats_period_s`` and hands the dict it returns to every
router of the deployment (``RunningReplica.routing_stats``).  A replica running ttlpolicy puts
one entry there, under ``REPORT_KEY``, made by ``routing_stats``:

* the figures of ``ttlpolicy.ProgramRouter.report``: ``free_blocks``, ``total_blocks``,
  ``queue_len``, ``queued_tokens``, ``working_set_blocks``, ``cached_fraction``;
* ``block_size`` (tokens per KV block: the router sizes a call's ``blocks_needed`` with it);
* ``pins``: the live pins, ``[program_id, remaining_s, blocks]``, longest-lived first, at most
  ``max_pins`` of them (``pins_left_out`` counts the rest).  A pin's *remaining* seconds, not
  its deadline: the router converts it to its own clock, so replica and router need not
  share one (``at``, the replica's wall time, tells the router how old the report is);
* ``seq``: counts the reports of this replica; the router applies each report once (a report
  it applied undoes the router's own count of the calls it sent since).

Two sources of the figures, both thin readers (no rule of the model is restated here):
``lifecycle_stats`` reads a ``ttlpolicy.ProgramScheduler`` (the pin table every adapter's
``ProgramLifecycle`` holds) plus the engine's own figures; ``vllm_scheduler_stats`` reads a
``ttlpolicy_vllm.TTLScheduler`` in the same process.  ``RoutingStatsMixin`` gives a Serve
deployment the ``record_routing_stats`` method.

This module does not import Ray: a replica's engine process may build its report without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "DEFAULT_MAX_PINS",
    "REPORT_KEY",
    "REPORT_VERSION",
    "RoutingStatsMixin",
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
    pins: Iterable[tuple[str, float, int]] = (),
    max_pins: int = DEFAULT_MAX_PINS,
    at: float | None = None,
) -> dict[str, Any]:
    """The routing-stats dict of one report (``{REPORT_KEY: {...}}``).  ``pins``: (program id,
    remaining seconds, blocks); those with no time left are left out, the rest sorted
    longest-lived first and cut at ``max_pins``.  The figures are passed as given: the router
    validates them (``ProgramRouter.report``) and ignores a report it refuses."""
    live = sorted(
        ((pid, float(left), int(blocks)) for pid, left, blocks in pins if left > 0.0),
        key=lambda p: (-p[1], p[0]),
    )
    return {
        REPORT_KEY: {
            "v": REPORT_VERSION,
            "seq": seq,
            "at": time.time() if at is None else at,
            "free_blocks": free_blocks,
            "total_blocks": total_blocks,
            "queue_len": queue_len,
            "queued_tokens": queued_tokens,
            "working_set_blocks": working_set_blocks,
            "cached_fraction": cached_fraction,
            "block_size": block_size,
            "pins": [list(p) for p in live[:max_pins]],
            "pins_left_out": max(0, len(live) - max_pins),
        }
    }


def lifecycle_stats(
    scheduler: Any, now: float, *, max_pins: int = DEFAULT_MAX_PINS, **figures: Any
) -> dict[str, Any]:
    """``routing_stats`` (``figures``: its other keyword arguments) with the pins of
    ``scheduler`` (a ``ttlpolicy.ProgramScheduler``, e.g. ``ProgramLifecycle.scheduler``) as of
    ``now`` on its clock."""
    pins = [(p.program_id, p.deadline_s - now, p.blocks) for p in scheduler.pins()]
    return routing_stats(pins=pins, max_pins=max_pins, **figures)


def vllm_scheduler_stats(
    scheduler: Any, *, seq: int, max_pins: int = DEFAULT_MAX_PINS
) -> dict[str, Any]:
    """The report of a ``ttlpolicy_vllm.TTLScheduler`` living in this process (vLLM with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; by default vLLM runs its scheduler in an engine-core
    subprocess, out of a Serve replica's reach: see docs/ray.md).  Reads: the block pool's free
    blocks, ``total_blocks``, the waiting queue and its prompt tokens not yet computed, load
    control's working set (else the blocks in use), the share of returning calls that found
    their pin (the adapter's counters) and the pin table."""
    now = scheduler.clock()
    total = int(scheduler.total_blocks)
    free = min(total, int(scheduler.kv_cache_manager.block_pool.get_num_free_blocks()))
    waiting = list(scheduler.waiting)
    queued = sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in waiting)
    admission = scheduler.admission
    if admission is not None and scheduler.policy.config.admission:
        working = int(admission.working_set_blocks(now))
    else:
        working = total - free
    m = scheduler.ttl_metrics
    missed = (
        m.returns_missed_expired
        + m.returns_missed_reclaimed
        + m.returns_missed_not_pinned
        + m.returns_missed_budget_full
    )
    returns = m.pins_handed_over + missed
    cached = m.pins_handed_over / returns if returns else 1.0
    return lifecycle_stats(
        scheduler.programs,
        now,
        seq=seq,
        free_blocks=free,
        total_blocks=total,
        queue_len=len(waiting),
        queued_tokens=queued,
        working_set_blocks=min(total, working),
        cached_fraction=cached,
        block_size=int(scheduler.block_size),
        max_pins=max_pins,
    )


class RoutingStatsMixin:
    """Gives a Serve deployment class ``record_routing_stats`` (Ray calls it by that name):
    the class defines ``ttlpolicy_routing_stats(seq) -> dict`` (``lifecycle_stats`` or
    ``vllm_scheduler_stats``); the mixin numbers the reports.  Should it raise, Ray logs the
    error and its routers keep the replica's last report."""

    _ttlpolicy_seq = 0
    ttlpolicy_routing_stats: Callable[[int], dict[str, Any]]

    def record_routing_stats(self) -> dict[str, Any]:
        self._ttlpolicy_seq += 1
        return self.ttlpolicy_routing_stats(self._ttlpolicy_seq)
