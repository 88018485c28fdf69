"""Which waiting request runs when the head of the queue is too large for memory now.

Engines admit waiting requests in their queue's order and stop at the first whose prompt
does not fit (vLLM's ``schedule`` breaks when ``allocate_slots`` fails; the simulator's
``Engine._admit`` does the same), so one large head holds every request behind it though free
memory would hold some.  The library's order stays the order: only when its head does not
fit does the first of the next ``depth`` waiting requests, in that order, that fits and that
load control lets run (asked in that order: ``fits`` first) go ahead of it, through
``ProgramScheduler.take`` (the others keep their places).  Past a head load control refuses
nothing skips: load control admits programs first come, first served.

On with a reload tier (``skip_depth_for``): over 32 arrival seeds it raised throughput
0.27/0.21 % and cut mean completion 1.1/0.7 % (8B/70B, docs/investigations/2026-rivals.md,
"The skip made a rule").  Off without one: the call run early evicts cached contexts that
must then be recomputed, and mean completion rose 2.6-5.1 % at the heavy points there.
Bounded: ``first_waiting`` reads ``depth + 1`` requests, and each is asked at most once.  A
head is passed at most ``MAX_PASSES`` times (``HeadSkips``): a stream of small requests, one
client's or many, cannot keep taking the memory a large head waits for (backfilling's
starvation); the runs passed one head at most 19 times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "MAX_PASSES",
    "MAX_SKIP_DEPTH",
    "SKIP_DEPTH",
    "HeadSkips",
    "check_skip_depth",
    "first_runnable",
    "skip_depth_for",
    "skip_past",
    "waiting_after",
]

#: Waiting requests after the head asked whether they fit (the runs' depth).
SKIP_DEPTH = 8
#: The most a deployment may set (each is asked at every admission past a large head).
MAX_SKIP_DEPTH = 64
#: Requests run past one head at most; then it is passed no more until it runs.
MAX_PASSES = 64


def check_skip_depth(depth: object, field: str = "skip_depth") -> int:
    """``depth`` as a skip depth in ``[0, MAX_SKIP_DEPTH]`` (0: never skip); anything else is
    refused with ``field`` and the value."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_SKIP_DEPTH:
        raise ValueError(f"{field} must be an integer in [0, {MAX_SKIP_DEPTH}], got {depth!r}")
    return depth


def skip_depth_for(reload_tier: bool) -> int:
    """The default depth: ``SKIP_DEPTH`` on an engine with a reload tier, else 0 (module
    doc)."""
    return SKIP_DEPTH if reload_tier else 0


def skip_past(
    scheduler: Any,
    head: str,
    depth: int,
    fits: Callable[[str], bool],
    may_run: Callable[[str], bool],
) -> str | None:
    """The request to run instead of ``head``, the ``ProgramScheduler``'s head whose prompt
    does not fit: the first of the next ``depth`` waiting requests in its order for which
    ``fits`` and then ``may_run`` (load control's answer, which may admit its program) say
    yes; None if none (the head stays the head)."""
    if depth <= 0:
        return None
    return first_runnable(waiting_after(scheduler, head, depth), fits, may_run)


def waiting_after(scheduler: Any, head: str, depth: int) -> list[str]:
    """The scheduler's next ``depth`` waiting requests after ``head``, in its order
    (``first_waiting``: no scan of the queue)."""
    return [rid for rid in scheduler.first_waiting(depth + 1) if rid != head][:depth]


def first_runnable(
    rids: Iterable[str], fits: Callable[[str], bool], may_run: Callable[[str], bool]
) -> str | None:
    """The first of ``rids`` (in the order to try them) for which ``fits`` and then
    ``may_run`` say yes; None if none."""
    for rid in rids:
        if fits(rid) and may_run(rid):
            return rid
    return None


class HeadSkips:
    """``skip_past`` with its bound on passes of one head: what an engine's queue keeps."""

    def __init__(self, depth: int) -> None:
        self.depth = check_skip_depth(depth)
        self._head: str | None = None  # the head passed last, and how often
        self._passes = 0

    def choose(
        self,
        scheduler: Any,
        head: str,
        fits: Callable[[str], bool],
        may_run: Callable[[str], bool],
    ) -> str | None:
        """``skip_past`` with this depth, None once ``head`` was passed ``MAX_PASSES`` times."""
        if head != self._head:
            self._head, self._passes = head, 0
        if self._passes >= MAX_PASSES:
            return None
        return skip_past(scheduler, head, self.depth, fits, may_run)

    def taken(self) -> None:
        """The request ``choose`` named ran past the head."""
        self._passes += 1
