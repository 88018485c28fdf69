"""Park a waiting program's KV in the CPU tier during its tool call, and bring it back ahead
of the predicted return (issue 46, part 3).

Pinning keeps a chain in GPU memory for the whole tool call, although the return can only
come later than the tool's shortest durations.  With a CPU tier the chain can wait in DRAM
and be copied back (``reload_s``) so as to be on the GPU by the time the program is likely
back.  The rule reads only the tool's recorded durations (the CDF ``TTLPolicy`` keeps), never
the call's own:

* the returns it plans for are those whose tool outlasts the reload (a shorter one would
  find its KV on the GPU only if it never left: it is reloaded on arrival as before);
* of the recorded durations longer than ``reload_s`` (at least ``min_samples`` of them), it
  picks the window ``[ready_s, until_s]`` holding ``ceil(target · n)`` of them whose
  expected GPU time — the chain is on the GPU from ``ready_s`` till the return or
  ``until_s``, whichever is first — is the least (sum over the recorded durations ``d`` of
  ``clip(d, ready_s, until_s) − ready_s``);
* it parks only when the copy back would start at least one reload after the call ended
  (``upload_s ≥ reload_s``: the chain stays off the GPU for at least a round trip);
  otherwise the caller keeps its pin.

The caller offloads the chain when the call ends, starts its copy back at ``upload_s``
(``ready_s − reload_s``) after it, keeps it on the GPU until ``until_s``, and then lets it go
as any unpinned chain.  Nothing here reads a clock or keeps state.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ._validate import non_negative

#: share of the returns that outlast a reload meant to find their KV back on the GPU
TARGET = 0.9
#: the fewest recorded durations longer than the reload that a plan is made from
MIN_SAMPLES = 8


@dataclass(frozen=True, slots=True)
class ParkPlan:
    """Seconds after the call's end: start the copy back (``upload_s``), on the GPU
    (``ready_s``), let it go (``until_s``); ``covered``: the share of the recorded durations
    longer than the reload that fall in ``[ready_s, until_s]``."""

    upload_s: float
    ready_s: float
    until_s: float
    covered: float


def plan_park(
    sorted_durations_s: Sequence[float],
    reload_s: float,
    target: float = TARGET,
    min_samples: int = MIN_SAMPLES,
) -> ParkPlan | None:
    """The park plan for a chain that takes ``reload_s`` to copy back, from the tool's
    recorded durations (ascending), or None: keep it on the GPU as decided."""
    reload = non_negative("reload_s", reload_s)
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target must be in (0, 1], got {target!r}")
    if min_samples < 1:
        raise ValueError(f"min_samples must be >= 1, got {min_samples!r}")
    first = bisect.bisect_right(sorted_durations_s, reload)
    longer = sorted_durations_s[first:]
    n = len(longer)
    if n < min_samples:
        return None
    k = math.ceil(target * n - 1e-9)  # (k of n: target · n up to a rounding error)
    # prefix sums: the GPU time of window [longer[s], longer[s + k - 1]] is the sum of its
    # durations less k · start, plus (start − end)'s complement for the longer ones
    prefix = [0.0]
    for d in longer:
        prefix.append(prefix[-1] + d)
    best_s, best_area = 0, math.inf
    for s in range(n - k + 1):
        e = s + k - 1
        start, end = longer[s], longer[e]
        area = prefix[e + 1] - prefix[s] - k * start + (n - 1 - e) * (end - start)
        if area < best_area:
            best_s, best_area = s, area
    ready = longer[best_s]
    upload = ready - reload
    if upload < reload:
        return None  # (off the GPU for less than a round trip: not worth the copies)
    until = longer[best_s + k - 1]
    inside = bisect.bisect_right(longer, until) - bisect.bisect_left(longer, ready)
    return ParkPlan(upload, ready, until, inside / n)
