"""A bounded skip-ahead past a head of the queue too large for memory (issue 46, the batching
part of the throughput gap; docs/investigations/2026-rivals.md, "Throughput at the heavy
points").

vLLM admits waiting requests in its queue's order and stops at the first whose whole prompt
does not fit (``scheduler_reserve_full_isl``; the simulator's ``Engine._admit`` does the
same), so one large head keeps every call behind it waiting though free and free cached
blocks would hold some of them (``bench/batch_wait.py`` counts how often).  The skip is now
the library's rule (``ttlpolicy.serving.skip_ahead``: the adapters and the simulator's
ttlpolicy take it by default with a tier; ``ttlpolicy-offload:skip=0`` is the order before
it).  This module keeps the bench's variants of it, each through that rule:

* ``ttlpolicy-offload[:variant]+skip=K`` — the rule with depth K, for the bench's other
  orders to build on (``throughput_tail``, ``admit_ahead``: their variants run without the
  library's skip unless they name ``+skip=K``);
* ``ttlpolicy-offload[:variant]+lcskip=K`` — the same, and past a head that load control
  refuses too: the first of the next K waiting calls that fits and that load control admits
  (``ProgramLifecycle.may_run``) runs.  Load control admits programs first-come-first-served
  and the library ranks every call of a started program before any first call, so behind a
  refused head wait only younger programs' first calls, which it refuses too: ``lcskips``
  counts the calls taken so (none is expected);
* ``mori+skip=K`` — the same over MORI's order (resident programs first, then by program
  arrival, its CPU-tier admission applied).
"""

from __future__ import annotations

import heapq
from typing import Any

from heavy_bound import ChosenOffload
from ttlpolicy.serving.skip_ahead import HeadSkips
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Policy
from ttlpolicy.sim.policies.base import prompt_fits
from ttlpolicy.sim.policies.mori import Mori
from ttlpolicy.sim.policies.ttlpolicy_plugin import make_ttlpolicy

SKIP = "+skip="
#: the skip past a head load control refuses as well
LC_SKIP = "+lcskip="


def check_depth(depth: int) -> int:
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"skip depth must be an integer >= 1, got {depth!r}")
    return depth


class SkipAheadOffload(ChosenOffload):
    """``ttlpolicy-offload+skip=K`` (module doc)."""

    def __init__(self, depth: int, past_refusal: bool = False, **options: Any) -> None:
        super().__init__(**options)
        # (the library's rule with its bound on passes of one head, as the engines keep it)
        self._head_skips = HeadSkips(check_depth(depth))
        self.past_refusal = past_refusal
        #: admissions past the library's head; of them, past a head load control refused
        self.skips = 0
        self.lcskips = 0
        self._past_refused = False

    def peek(self) -> Call | None:
        self._chosen = None
        self._past_refused = False
        head = super().peek()
        if self._giving_way:
            return head
        if head is None:
            library_head = self.sched.peek()
            if library_head is None or not self.past_refusal:
                return None  # (without ``past_refusal`` nobody passes a refused head)
            self._past_refused = True
            return self._skip(library_head) or None
        if self.prompt_fits(str(head.call_id)):
            return head
        return self._skip(str(head.call_id)) or head

    def _skip(self, head_rid: str) -> Call | None:
        """The library's skip (``skip_ahead.HeadSkips``) past ``head_rid``, named as the head
        (``_chosen``); None if none."""
        self._chosen = self._head_skips.choose(self.sched, head_rid, self.prompt_fits, self.may_run)
        return None if self._chosen is None else self._calls[self._chosen]

    def popped(self, call: Call, taken: bool) -> None:
        if taken:
            self._head_skips.taken()
        self.skips += taken
        self.lcskips += taken and self._past_refused


class SkipAheadMori(Mori):
    """``mori+skip=K`` (module doc)."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.depth = check_depth(depth)
        self.name = f"mori{SKIP}{depth}"
        self.skips = 0
        self._skipping = False

    def peek(self) -> Call | None:
        self._skipping = False
        head = super().peek()
        view = self.view
        if head is None or view is None or prompt_fits(view, head):
            return head
        ready = (c for c in self._waiting.values() if c is not head and self._cpu_tier_admits(c))
        for call in heapq.nsmallest(self.depth, ready, key=self._rank):
            if prompt_fits(view, call):
                self._skipping = True
                return call
        return head

    def pop(self) -> Call:
        skipping = self._skipping
        call = super().pop()  # (Continuum's pop takes what ``peek`` names)
        self.skips += skipping
        return call


def make_skip_policy(name: str) -> Policy:
    """``NAME+skip=K`` as the module doc says."""
    past_refusal = LC_SKIP in name
    head, _, depth_text = name.rpartition(LC_SKIP if past_refusal else SKIP)
    try:
        depth = int(depth_text)
    except ValueError:
        raise ValueError(
            f"policy {name[:64]!r}: depth {depth_text[:32]!r} is not an integer"
        ) from None
    check_depth(depth)
    if head == "mori" and not past_refusal:
        return SkipAheadMori(depth)
    policy_name, _, variant = head.partition(":")
    if policy_name != "ttlpolicy-offload":
        raise ValueError(f"policy {name[:64]!r}: {SKIP} applies to mori and ttlpolicy-offload")
    policy = make_ttlpolicy(
        policy_name, variant, cls=lambda **o: SkipAheadOffload(depth, past_refusal, **o)
    )
    policy.name = name
    return policy
