"""The waiting queue ordered by ``ttlpolicy.ProgramScheduler``, inside SGLang's scheduling pass.

SGLang has no registry of scheduling policies: ``SchedulePolicy.calc_priority`` sorts the
waiting queue in place on each pass.  The plug-in wraps it (an AROUND hook): SGLang's own
``calc_priority`` runs first (its prefix matching and statistics stay), then, when the tree
cache is a ``TTLRadixCache``, the queue is re-sorted by the ProgramScheduler's priority
(preempted, then pinned programs, then program arrival).  With any other tree cache the hook
changes nothing: installing the package alone leaves stock SGLang as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .cache import TTLRadixCache

#: What the plug-in wraps (SGLang 0.5.23).
TARGET = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"


def calc_priority_by_program(
    original: Callable[..., Any],
    policy: Any,
    waiting_queue: list[Any],
    running_batch: Any = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    t0 = time.perf_counter()
    result = original(policy, waiting_queue, running_batch, *args, **kwargs)
    cache = policy.tree_cache
    if isinstance(cache, TTLRadixCache):
        t1 = time.perf_counter()
        cache.ttl.order(waiting_queue, running_batch)
        m = cache.ttl.metrics
        m.schedule_calls += 1
        m.sglang_order_s += t1 - t0
        m.adapter_s += time.perf_counter() - t1
    return result
