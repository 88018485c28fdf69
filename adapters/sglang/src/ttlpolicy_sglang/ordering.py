"""The waiting queue ordered by ``ttlpolicy.ProgramScheduler``, inside SGLang's scheduling pass.

SGLang has no registry of scheduling policies: ``SchedulePolicy.calc_priority`` sorts the
waiting queue in place on each pass.  The plug-in wraps it (an AROUND hook): SGLang's own
``calc_priority`` runs first (its prefix matching and statistics stay), then, when the tree
cache is a ``TTLRadixCache``, the queue is re-sorted by the ProgramScheduler's priority
(preempted, then pinned programs, then program arrival).  With any other tree cache the hook
changes nothing: installing the package alone leaves stock SGLang as it was.

Load control: SGLang's prefill pass offers the sorted queue's requests one by one to
``PrefillAdder.add_one_req`` and stops at the first it refuses.  A second AROUND hook there
(``admit_by_program``) refuses a request whose program ``ttlpolicy.AdmissionControl`` holds
back (``ProgramTracker.may_run``): the pass stops at it, so nothing behind it starts either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sglang.srt.managers.schedule_policy import AddReqResult

from .cache import TTLRadixCache

#: What the plug-in wraps (SGLang 0.5.23).
TARGET = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
ADMISSION_TARGET = "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req"


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
        m = cache.ttl.metrics
        m.schedule_calls += 1  # (before the pass, which publishes it)
        cache.ttl.order(waiting_queue, running_batch)
        m.engine_s += t1 - t0
        m.adapter_s += time.perf_counter() - t1
    return result


def may_admit(cache: Any, req: Any) -> bool:
    """Whether load control lets ``req`` start (always, when ``cache`` is not the adapter's)."""
    if not isinstance(cache, TTLRadixCache):
        return True
    t0 = time.perf_counter()
    allowed = cache.ttl.may_run(req)
    cache.ttl.metrics.adapter_s += time.perf_counter() - t0
    return allowed


def admit_by_program(
    original: Callable[..., Any], adder: Any, req: Any, *args: Any, **kwargs: Any
) -> Any:
    if not may_admit(adder.tree_cache, req):
        return AddReqResult.OTHER  # "other reasons to stop adding requests": the pass ends
    return original(adder, req, *args, **kwargs)
