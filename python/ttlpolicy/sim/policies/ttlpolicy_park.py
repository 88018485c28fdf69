"""ttlpolicy-offload that parks a program's KV in the CPU tier during its tool call and
copies it back ahead of the predicted return (``ttlpolicy-offload:park``; issue 46, part 3).

The rule is the library's (``ttlpolicy.park.plan_park``, from the tool's recorded
durations); this module only executes it, as an engine with a prefetch hook would
(docs/engine-hooks.md):

* a call ends: the lifecycle decides as ever (its pin, if any, stays in its books, so its
  budget and load control see the program as kept); when the rule gives a plan, the chain is
  not pinned in GPU memory but joins the free queue — evicted to the CPU tier as memory is
  needed, the eviction order farthest return first — and its copy back is planned;
* at ``upload_s`` after the call's end the chain's CPU part is copied back
  (``Policy.prefetch``) into the room the eviction order gives it (unused blocks and the
  free chains it gives up first), the whole chain pinned while the copy runs; then the
  eviction order keeps it or not, as any free chain;
* ``park-hold``: copied back whatever it evicts, and pinned till ``until_s`` (a chain still
  on the GPU then is pinned where it is); ``park-oracle``: the copy timed by the call's real
  next gap, a bound that reads the future;
* a pin of a copied chain ends at its end, when the program returns, or when memory runs
  short (after the lifecycle's own pins).

The tool durations the rule reads are recorded here, at each return, as the lifecycle
records them (the tool's gap, from the call's end to the next call's issue): the native
``TTLPolicy`` does not expose its window.
"""

from __future__ import annotations

from typing import Any

import ttlpolicy as tp
from ttlpolicy.park import TARGET, ParkPlan, plan_park

from ..call import Call
from ..interface import EngineView, Load, Unpin, Verdict
from .base import PinTable, step_shortfall
from .ttlpolicy_plugin import TTLPolicyOffload, TTLPolicyPlugin, make_ttlpolicy
from .uploads import UploadPlan, earliest

#: Variant words of ``ttlpolicy-offload`` (``+``-joinable with its others): park chains in the
#: CPU tier during tool calls, copied back ahead of the predicted return; the same holding a
#: chain copied back pinned till the plan's end; the copy timed by the call's real next gap
#: (a bound that reads the future)
PARK, PARK_HOLD, PARK_ORACLE = "park", "park-hold", "park-oracle"
PARK_WORDS = frozenset((PARK, PARK_HOLD, PARK_ORACLE))

#: the oracle bound keeps a chain copied back pinned this long past the return it knows
ORACLE_SLACK_S = 1e-3


class TTLPolicyPark(TTLPolicyOffload):
    """``TTLPolicyOffload`` executing ``plan_park`` for each finished call."""

    prefetches = True

    def __init__(
        self,
        *args: object,
        target: float = TARGET,
        hold: bool = False,
        oracle: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.target = target
        #: keep a chain copied back pinned till the plan's ``until_s`` (else: through the
        #: copy only, then the eviction order keeps it; copied only into room that order
        #: gives it)
        self.hold = hold
        self.prefetch_keeps_cached = hold
        #: plan from the call's real next gap (a bound that reads the future)
        self.oracle = oracle
        self.upload_plan = UploadPlan()
        self.loaded = PinTable()  # chains copied back: program → (pin end, blocks)
        self.parked = 0  # calls whose chain was parked (counters for bench/rivals.py --why)
        self.prefetched = 0

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        cfg = self.ttl_policy.config
        self.durations = tp.ToolHistory(cfg.window, cfg.max_tools)

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.durations.observe(call.prev_tool, call.gap_s)
        self.upload_plan.cancel(call.program_id)
        self.loaded.take(call.program_id)  # (its pin, if any, goes with the chain at admission)
        return super().arrive(call, now)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        verdict = super().finished(call, now, chain_blocks, last_turn)
        if last_turn or not chain_blocks:
            return verdict
        reload_s = self._reload_s(chain_blocks)
        if self.oracle:
            plan = self._oracle_plan(call, reload_s)
        else:
            plan = plan_park(self._samples(call.turn.tool), reload_s, self.target)
        if plan is None:
            return verdict
        self.parked += 1
        self.upload_plan.plan(
            call.program_id, now + plan.upload_s, chain_blocks, now + plan.until_s
        )
        return Verdict.FREE

    @staticmethod
    def _oracle_plan(call: Call, reload_s: float) -> ParkPlan | None:
        """A bound, not a rule: the call's own next gap, read from the trace (the future),
        the copy back timed to end as the program returns."""
        gap_s = call.prog.program.turns[call.turn_index + 1].think_s
        if gap_s < 2.0 * reload_s:
            return None
        return ParkPlan(gap_s - reload_s, gap_s, gap_s + ORACLE_SLACK_S, 1.0)

    def _samples(self, tool: str | None) -> list[float]:
        """The durations the policy would decide from: the tool's, else all tools'."""
        cfg, h = self.ttl_policy.config, self.durations
        if tool is not None and h.count(tool) >= cfg.min_tool_samples:
            return h.samples(tool)
        return h.samples(None) if h.total_count() >= cfg.min_total_samples else []

    def _reload_s(self, blocks: int) -> float:
        return self.view.hardware.transfer_s(blocks * self._block_tokens)

    # -- copies back and their pins -------------------------------------------------------
    def prefetch(self, now: float, load: Load) -> None:
        for program, blocks, until_s in self.upload_plan.due(now):
            if self.hold:
                if load(program):
                    self.prefetched += 1
                    self.loaded.pin(program, max(until_s, now), blocks)
                continue
            # lean: copied back only into room the eviction order gives it (the chains it
            # gives up before this one), pinned through the copy only
            if blocks <= self._room_for(program) and load(program):
                self.prefetched += 1
                self.loaded.pin(program, now + self._reload_s(blocks), blocks)

    def _room_for(self, program: str) -> int:
        """GPU blocks a copy back of ``program`` may take: unused ones, and the free chains
        the eviction order gives up before it (LRU without one: all of them)."""
        view = self.view
        chains = view.cached_chains()
        order = self.eviction_order()
        if order is None or program not in chains:
            return view.unused_blocks + sum(b for p, b in chains.items() if p != program)
        before = 0
        for p in order(list(chains)):
            if p == program:
                break
            before += chains[p]
        return view.unused_blocks + before

    def next_deadline(self) -> float | None:
        return earliest(
            super().next_deadline(),
            earliest(self.upload_plan.next_s(), self.loaded.next_deadline()),
        )

    def expire(self, now: float) -> list[str]:
        # the lifecycle's pins due, but not a chain copied back (its own end: ``until_s``)
        loaded = self.loaded.pins
        due = [p for p in super().expire(now) if p not in loaded]
        return due + self.loaded.expire(now)

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        return super().reclaim(blocks_needed, now, for_program) or self.loaded.reclaim(
            blocks_needed
        )

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        super().give_way(step_blocks, now, unpin)
        if not self.loaded.pins:
            return
        short, _head = step_shortfall(self, self.view, step_blocks, self._total)
        if short > 0:
            for program in self.loaded.reclaim(short):
                unpin(program)

    def program_done(self, program_id: str, turns: int) -> None:
        super().program_done(program_id, turns)
        self.upload_plan.cancel(program_id)
        self.loaded.take(program_id)

    def program_left(self, program_id: str) -> bool:
        self.upload_plan.cancel(program_id)
        loaded = self.loaded.take(program_id)
        return super().program_left(program_id) or loaded


def is_park(variant: str) -> bool:
    """Whether a ttlpolicy variant (``a+b``) names a park word."""
    return any(w.strip() in PARK_WORDS for w in variant.split("+"))


def make_park(base: str, variant: str) -> TTLPolicyPlugin:
    """``ttlpolicy-offload:park`` (with ``park-hold``, ``park-oracle`` and the mechanism
    words of ``make_ttlpolicy``); parking needs the CPU tier."""
    if base != "ttlpolicy-offload":
        raise ValueError(f"{base}:{variant[:64]}: '{PARK}' needs the CPU tier (ttlpolicy-offload)")
    words = {w.strip() for w in variant.split("+") if w.strip()}
    rest = "+".join(sorted(words - PARK_WORDS))
    hold, oracle = PARK_HOLD in words, PARK_ORACLE in words

    def build(*args: Any, **kwargs: Any) -> TTLPolicyPlugin:
        return TTLPolicyPark(*args, hold=hold, oracle=oracle, **kwargs)

    plugin = make_ttlpolicy(base, rest, build)
    plugin.name = f"{base}:{'+'.join(sorted(words))}"
    return plugin
