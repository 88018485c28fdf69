"""``clairvoyant``: a policy that reads the trace's future — every program's next calls (when
they come, how large they are) and so each tool's real duration.  A yardstick for the online
policies, never a default and never deployable.  It is a **strong heuristic, not a proven
optimum**: each rule below is the natural one given the future, but together they are not
shown optimal (scheduling with memory is NP-hard even offline).

* **Pins** (exact TTLs): a call's context is pinned until the instant its program's next
  call is issued — exactly its return, never longer — unless that call reuses nothing (then
  nothing is kept for it).  A pin is given up only when memory is needed now, by work that
  starts before that return (a running call's next step, or the head of the queue), and then
  the pin whose return is furthest goes first (Belady's rule).  So a pin it keeps is never
  missed: the return takes it over, and the engine holds it till admission (tested,
  ``tests/sim/test_bounds.py``).  Switching the pins off (``clairvoyant:pins``, Belady's
  order alone) is as good within 2 %, better at some points: the pins are not what makes it
  a bound (docs/investigations/bounds-folds-and-the-expected-working-set.md).
* **Eviction** (Belady): free cached chains are evicted furthest next use first — a chain whose
  program never returns, or whose next call reuses nothing, before any other.  Next uses are
  instants known in advance, so the order changes only at events.
* **Admission** by real future footprint: programs are admitted first-come-first-served; the
  oldest waiting program is admitted when none is, or when its peak footprint (its largest
  call, prompt and output) fits beside the admitted programs' *working set*: the footprints of
  their next calls (the running or waiting ones' current calls) for those that are live or
  back within ``n · rebuild_s`` (``n`` admitted programs; ``rebuild_s`` the exact time to
  prefill that call's reusable prefix).  The horizon is the online policy's
  (``ttlpolicy.AdmissionControl``), here with real next uses and sizes instead of estimates.
  With no event the working set only grows (returns come closer), so a refused head stays
  refused until an event: nothing to recheck on a clock.
* **Serving order**: preempted calls first, then program-level FCFS (by first arrival).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..call import Call
from ..interface import EngineView, Unpin, Verdict
from .base import PinTable, QueuePolicy, step_shortfall


class _FurthestReturnFirst(PinTable):
    """The pin table with Belady's reclaim: the pin whose deadline (its program's return) is
    furthest goes first."""

    @staticmethod
    def reclaim_key(pin: tuple[float, int, int]) -> tuple:
        return (-pin[0], -pin[2])


class Clairvoyant(QueuePolicy):
    """Implements ``sim.interface.Policy`` with the trace's future (module docstring)."""

    name = "clairvoyant"
    #: a pin taken over at its program's return keeps its chain held till admission
    holds_handed_pins = True
    #: pins are given up before each step, when the step and the head of the queue need
    #: their blocks (``give_way``), so a chain held for a waiting return never yields to the
    #: head while a pin whose return is further is kept
    reclaims_ahead = True

    def __init__(
        self,
        *,
        pins: bool = True,
        evict: bool = True,
        admission: bool = True,
        sizes: bool = True,
        horizon_scale: float = 1.0,
    ) -> None:
        super().__init__()
        # mechanisms a variant switches off (``make_clairvoyant``): which oracle is worth what
        self._pins, self._evict, self._admission = pins, evict, admission
        self._sizes = sizes
        # the admission horizon is ``horizon_scale · n · rebuild_s`` (probes try others)
        self._horizon_scale = horizon_scale
        self.table = _FurthestReturnFirst()
        self._next_use_s: dict[str, float] = {}  # program → its next call's issue instant
        self._live: set[str] = set()  # programs with a call waiting or running
        self._admitted: dict[str, Call] = {}  # program → its latest call (not ended)
        self._peak: dict[str, int] = {}  # program waiting to start → its largest call, blocks
        self._total = 0  # KV blocks
        self._block_tokens = 1
        # counters the bound tests read: pins made, given up (reclaimed), taken over at return
        self.pins_made = 0
        self.pins_reclaimed = 0
        self.pins_taken = 0

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        self._block_tokens = view.config.block_tokens
        self._total = view.hardware.kv_capacity_blocks(self._block_tokens)

    # -- the queue ------------------------------------------------------------------------
    def key(self, call: Call) -> tuple:
        return (not call.preempted, call.program_arrival_s, call.issue_s, call.call_id)

    def arrive(self, call: Call, now: float) -> bool:
        super().arrive(call, now)
        pid = call.program_id
        self._live.add(pid)
        if call.turn_index:
            self._admitted[pid] = call
        taken = self.table.take(pid)
        self.pins_taken += taken
        return taken

    def peek(self) -> Call | None:
        call = super().peek()
        if call is None or call.turn_index or call.preempted or call.program_id in self._admitted:
            return call
        if not self._admission:
            return call
        return call if self._fits(call) else None

    def pop(self) -> Call:
        call = super().pop()
        self._admitted[call.program_id] = call
        self._peak.pop(call.program_id, None)
        return call

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self._block_tokens)

    def _fits(self, head: Call) -> bool:
        """Whether the head's program may start: its peak footprint beside the admitted
        programs' working set (module docstring)."""
        n = len(self._admitted)
        if n == 0:
            return True
        assert self.view is not None, "bind() first"
        now = self.view.now
        working = 0
        sizes = []  # (without the sizes' oracle) the members' latest contexts, blocks
        for pid, call in self._admitted.items():
            turns = call.prog.program.turns
            current = self._blocks(call.prompt + call.output)
            sizes.append(current)
            if pid in self._live:
                working += current
                continue
            nxt = call.turn_index + 1
            if nxt >= len(turns):
                continue
            turn = turns[nxt]
            ahead_s = self._next_use_s.get(pid, math.inf) - now
            reuse = turn.reusable_blocks * self._block_tokens
            if ahead_s > self._horizon_scale * n * self.view.prefill_s(reuse):
                continue
            working += (
                self._blocks(turn.input_tokens + turn.output_tokens) if self._sizes else current
            )
        if not self._sizes:  # the online policy's guess: its first call, or the members' mean
            first = self._blocks(head.prompt)
            return working + max(first, math.ceil(sum(sizes) / n)) <= self._total
        peak = self._peak.get(head.program_id)
        if peak is None:
            turns = head.prog.program.turns
            peak = max(self._blocks(t.input_tokens + t.output_tokens) for t in turns)
            self._peak[head.program_id] = peak
        return working + peak <= self._total

    # -- events ---------------------------------------------------------------------------
    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        pid = call.program_id
        self._live.discard(pid)
        turns = call.prog.program.turns
        nxt = call.turn_index + 1
        if last_turn or nxt >= len(turns) or turns[nxt].reusable_blocks == 0:
            self._next_use_s[pid] = math.inf  # nothing of this chain is used again
            return Verdict.FREE
        back_s = now + turns[nxt].think_s  # the engine issues the next call then
        self._next_use_s[pid] = back_s
        if chain_blocks == 0 or not self._pins:
            return Verdict.FREE
        self.table.pin(pid, back_s, chain_blocks)
        self.pins_made += 1
        return Verdict.PIN

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        """What the running calls' next step and the head lack (``step_shortfall``, as the
        online policy measures it), taken from pins by ``reclaim``: Belady's order."""
        assert self.view is not None  # (bound before the run)
        short, _ = step_shortfall(self, self.view, step_blocks, self._total)
        for program in self.reclaim(short, now) if short > 0 else ():
            unpin(program)

    def expire(self, now: float) -> list[str]:
        return self.table.expire(now)

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        out = self.table.reclaim(blocks_needed)
        self.pins_reclaimed += len(out)
        return out

    def next_deadline(self) -> float | None:
        return self.table.next_deadline()

    def program_done(self, program_id: str, turns: int) -> None:
        self._admitted.pop(program_id, None)
        self._live.discard(program_id)
        self._next_use_s.pop(program_id, None)  # (unknown programs' chains go first)

    def eviction_order(self) -> Callable[[list[str]], list[str]] | None:
        """Belady: furthest next use first (a sort by each program's own instant); None (the
        engine's LRU) with eviction switched off."""
        if not self._evict:
            return None
        next_use = self._next_use_s

        def order(programs: list[str]) -> list[str]:
            return sorted(programs, key=lambda p: -next_use.get(p, math.inf))

        return order

    def eviction_order_change_s(self, programs: list[str], from_s: float, until_s: float) -> float:
        """Next uses are fixed instants: the order changes only at events."""
        return math.inf


#: mechanisms a variant name may switch off, as ``ttlpolicy:<mechanism>`` does
MECHANISMS = ("pins", "evict", "admission", "sizes")


def make_clairvoyant(variant: str) -> Clairvoyant:
    """``clairvoyant``, or ``clairvoyant:<mechanism>[+<mechanism>]`` with those switched off:
    ``pins`` (nothing pinned: Belady's eviction order alone keeps contexts), ``evict`` (LRU
    eviction), ``admission`` (a program starts whenever its first call fits), ``sizes``
    (admission counts each admitted program at its latest context, not its next call's, and
    a newcomer at its first call or the admitted programs' mean, the larger — the sizes an
    online policy knows — instead of its largest call)."""
    words = [w for w in variant.split("+") if w] if variant else []
    unknown = [w for w in words if w not in MECHANISMS]
    if unknown:
        raise ValueError(
            f"unknown clairvoyant variant {unknown[0][:32]!r}; known: {', '.join(MECHANISMS)}"
        )
    policy = Clairvoyant(**{w: False for w in words})
    if words:
        policy.name = f"clairvoyant:{'+'.join(sorted(words))}"
    return policy
