"""What the scheduler knows about a finished request's program, for the offload tier's policy.

``TTLScheduler`` (GPU side) and ``TTLCachePolicy`` (CPU tier) run in the same scheduler
process, but vLLM gives the tier only the request id (``ReqContext.req_id``).  When a program
request finishes, the scheduler notes here whether its program ended (``last_turn``, abort) or
waits on a tool for about ``wait_s`` seconds; the policy reads the note when the tier hears of
the same request finishing.  Bounded: the oldest notes are forgotten first, and request ids
(client input) are stored under ``scheduler_key`` (long ids become a digest).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from .identity import scheduler_key

MAX_NOTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Hint:
    ended: bool  # the program will send no more requests
    wait_s: float | None  # expected wait before the program's next request (None: unknown)


_notes: OrderedDict[str, Hint] = OrderedDict()


def note(request_id: str, *, ended: bool, wait_s: float | None = None) -> None:
    if wait_s is not None and not (math.isfinite(wait_s) and wait_s >= 0.0):
        raise ValueError(f"wait_s must be finite and >= 0 or None, got {wait_s!r}")
    key = scheduler_key(request_id)
    _notes.pop(key, None)
    _notes[key] = Hint(bool(ended), wait_s)
    while len(_notes) > MAX_NOTES:
        _notes.popitem(last=False)


def lookup(request_id: str) -> Hint | None:
    """The note for ``request_id`` (consumed), or None."""
    return _notes.pop(scheduler_key(request_id), None)


def clear() -> None:
    _notes.clear()


def size() -> int:
    return len(_notes)
