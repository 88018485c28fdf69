"""The CacheTTL paper's model and its ablation (Continuum, arXiv 2511.02230, Fig. 16), all
driven through the library with ``PolicyConfig.published()`` — no rule restated here:

* ``cachettl`` — the published model: τ* by Eq. 2 from tool-duration CDFs, program-level
  FCFS with pinned programs first, pins handed over when the program's next call is
  scheduled, no pin budget (latest-arrived program unpinned first under pressure);
* ``static-ttl`` — the same, but every tool call pinned for the cold-start value
  (Exp(1 s) prior, η = 1: τ = ln(T + miss)), never learning from durations;
* ``program-fcfs`` — the same scheduler with no pins (a zero TTL cap): program-level FCFS.

The miss cost is the engine's own prefill time of the context (what a quadratic fit of
isolated prefills gives), or its reload time when the engine has a CPU tier.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import ttlpolicy as tp

from ..interface import EngineView
from .ttlpolicy_plugin import TTLPolicyPlugin

#: ``static-ttl``: a cold start that never ends (the history's largest window).
NEVER_WARM = 1 << 20


class CacheTTL(TTLPolicyPlugin):
    name = "cachettl"
    #: ``PolicyConfig.published`` fields this variant changes
    overrides: ClassVar[dict[str, Any]] = {}
    #: the paper's rule: a pin is released when the head of the queue cannot be admitted,
    #: at its admission — not ahead of each step, as the adapter does
    reclaims_ahead = False

    def __init__(self) -> None:
        # the paper has no pin budget; its miss cost is exact (``miss_cost_s`` below), so
        # there is no fitted price to feed (``adapter=False``)
        super().__init__(pin_budget_fraction=1.0, adapter=False)

    def bind(self, view: EngineView) -> None:
        self.config = tp.PolicyConfig.published(
            kv_bytes_per_token=view.hardware.kv_bytes_per_token, **self.overrides
        )
        super().bind(view)

    def miss_cost_s(self, tokens: int) -> float:
        prefill = self.view.prefill_s(tokens)
        if self.view.cpu_tier:
            return min(prefill, self.view.hardware.transfer_s(tokens))
        return prefill

    def next_deadline(self) -> float | None:
        # The published pin expires only once now > deadline: wake just after it.
        d = self.sched.next_deadline_s
        return None if d is None else math.nextafter(d, math.inf)


class StaticTTL(CacheTTL):
    name = "static-ttl"
    overrides: ClassVar[dict[str, Any]] = {
        "min_tool_samples": NEVER_WARM,
        "min_total_samples": NEVER_WARM,
    }


class ProgramFCFS(CacheTTL):
    name = "program-fcfs"
    overrides: ClassVar[dict[str, Any]] = {"max_ttl_s": 0.0}


def make_cachettl(base: str, variant: str = "") -> CacheTTL:
    """``cachettl``, ``static-ttl`` or ``program-fcfs``; the variant ``fcfs-reclaim`` (on the
    first two) keeps program-level FCFS when memory is reclaimed: a waiting call takes only
    the pins of programs that arrived after its own, where the published rule, as read,
    gives any pin, latest-arrived first, to whatever heads the queue."""
    policy = {"cachettl": CacheTTL, "static-ttl": StaticTTL, "program-fcfs": ProgramFCFS}[base]()
    if variant == "fcfs-reclaim":
        policy.fcfs_reclaim = True
        policy.name = f"{base}:{variant}"
    return policy
