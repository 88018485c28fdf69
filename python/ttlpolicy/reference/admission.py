"""Program-level admission and eviction order: which programs may run, whose cache goes first.

On long-context agent sessions an engine holds the contexts of only a few programs.  Let in
more and every returning call finds its context evicted and re-prefills it: the engine
thrashes (Denning, "Thrashing: its causes and prevention", 1968).  This module keeps the
*working set* — the contexts of admitted programs expected back soon — within memory, and
chooses the cache to evict by expected time to next use instead of LRU.

Inputs, per program (the engine reports them; the tool-gap CDF is the policy's
``ToolHistory``, fed by ``ProgramScheduler`` with every measured gap):

* ``blocks``: its footprint, the blocks of its latest context (``arrive``: blocks needed;
  ``finish``: blocks held; the larger since contexts only grow);
* ``rebuild_s``: what losing that context costs (``finish``: the prefill time, or the reload
  time from an offload tier);
* the tool its last call ended with, and when.

Rules (the same in both backends):

* **Next use.**  A program with a live request (waiting or running) uses its context now: 0.
  A program away on tool ``f`` for ``e`` seconds returns, by the median of ``f``'s durations
  longer than ``e``, in ``median(D | D > e) − e`` seconds — ``D`` from the tool's window when
  it holds ``min_tool_samples``, else the global window, else an exponential prior of mean
  ``prior_mean_s`` (memoryless: ``μ·ln 2``).  A program whose last call ended without a tool
  (the turn ended; it waits on a human or on nothing), whose gap has outlasted every
  recorded duration — on the prior, ``prior_mean_s · (1 + ln(window))``, about the longest
  of ``window`` durations drawn from it (``away_limit_s``; before it, a program on the
  memoryless prior stayed expected back ``max_ttl_s``, and 300 such programs that never
  returned held every newcomer that long) — or who has been away longer than ``max_ttl_s``
  (no pin lasts longer: the policy never holds a context for such a gap, and a client that
  died during a tool call leaves the working set after at most that long), is
  not expected back: ``inf``.  So is a program an engine *inferred* from the prompt
  (``tenants.is_inferred``: its id, which no client can name) away longer than the
  ``inferred_away_quantile`` of its tool's durations (nearest rank; on the prior, the prior's
  quantile ``-prior_mean_s · ln(1 − q)``; 1 switches this off): a session that compacts or
  rewrites its context links as a new program, and no call comes for the old one again, yet
  nothing tells the engine it ended — kept, it held the working set against newcomers as
  long as any program away (bench/RESULTS.md, "Programs without ids in the simulator").  A
  program that does come back after that is live again, as any program back from ``inf``.
* **Working set** at ``now``: the sum of the footprints of the ``n`` admitted programs whose
  next use is at most ``n · rebuild_s`` — the programs whose context is cheaper to keep than
  to rebuild.  Rebuilding a context is a prefill that takes the engine's step budget, so it
  stalls each of the ``n`` programs sharing the engine for about ``rebuild_s``; keeping it
  only idles its blocks until the program is back.  With an offload tier ``rebuild_s`` is
  the reload time, the working set shrinks, and admission rarely holds anyone back.
* **Expected working set** (``PolicyConfig.expected_working_set``; off: the rule above):
  each admitted program counts its footprint times its chance of being back within the
  horizon, ``P(D <= e + h | D > e)`` from the same durations ``D`` — the recorded durations
  in ``(e, e + h]`` over those longer than ``e`` — rounded up to a block (integers: the two
  backends sum the same numbers in any order).  A live program counts whole, one not
  expected back not at all; one away on the prior (no duration recorded) whole when
  ``μ·ln 2 <= h``, as above.  The median rule counts a program whole or not at all, so a
  tool whose gaps are mostly short but sometimes long (a human) holds its whole footprint
  for a return that often does not come in time, or none for one that often does.
* **Horizon** ``h``: ``n · rebuild_s`` times ``PolicyConfig.working_set_horizon_scale``
  (default 1), in both rules.
* **Admission** (load control): programs are admitted first-come-first-served by their
  first arrival.  The oldest program not yet admitted (any of them on a tie) is admitted
  when no program is admitted, when a program that arrived at the same instant is admitted
  (a cohort: FCFS cannot order it, and a scheduler interleaves its requests, so a refused
  member could sit ahead of admitted ones and block them), or when the working set plus its
  expected footprint fits
  ``total_blocks`` — its own footprint, or the mean footprint of the admitted programs when
  that is larger (contexts grow: a program that starts small will grow as theirs did).  An admitted
  program stays admitted until it ends.  No other program may start before it.
* **Bounded wait** (why no program can hold the others back by staying in flight): a head the
  rule above refuses is admitted all the same when

  - its own footprint fits beside the working set, and only one program is admitted, with
    a live request: the admitted mean is then one program's footprint, a guess from one
    sample that the head will grow as large — so a client keeping one large program in
    flight back to back (more than half the memory: no newcomer's expected footprint would
    fit beside it) holds a small head at most until it asks at an instant the program is
    live (vLLM: the next step; within one of its turns).  A head whose own footprint does
    not fit still waits, and so does any head while that program is away (its context is
    what load control keeps);
  - one admitted program has finished ``MAX_TURNS_AHEAD`` turns since the head was first
    refused: no program runs more than that many turns ahead of a waiting one, whatever it
    does between them.

  Neither can become true without an event (``arrive``, ``finish``, ``end``), so
  ``next_shrink_s`` still names every instant a refusal may end.  On the agentic sessions
  neither fires (``bench/RESULTS.md``, "Load control under many programs").  Not bounded by
  them: programs *away* whose clients vanished hold the head until they have outlasted
  their durations — past the last recorded one, or on the prior (none recorded)
  ``prior_mean_s · (1 + ln(window))`` (79 s by default) — and at most ``max_ttl_s``.
* **Tenant shares** (why one tenant's programs cannot hold another's back): a program's
  tenant is read from its id (``tenants.tenant_of``); the tenants with a known program are
  active and share ``total_blocks`` by weight (``tenant_weights``, 1 each by default: a
  tenant's share is ``total_blocks · weight / W``).  A program refused by the rules above, or
  waiting behind another tenant's older program, is admitted all the same when it is its
  own tenant's oldest waiting program and its expected footprint (its own, or its tenant's
  admitted mean when larger) fits its tenant's share beside its tenant's working set.  So a
  tenant's new program waits only on its own tenant's programs (the bound: at once, when
  its tenant's working set leaves room in its share — it waits on another tenant only when
  its footprint alone exceeds its share), whatever other tenants keep in flight or away;
  programs start in arrival order within a tenant, not across tenants.  The working set
  may then exceed ``total_blocks``: the excess is another tenant's, over its share, whose
  contexts the engine evicts first by next use as ever.  With one active tenant the rule
  is the one above (its share is everything), so nothing changes for one tenant.  An
  engine that asks ``may_run`` only of its queue's first request must ask it of each
  tenant's first request too for the bound to hold.
* **When to ask again** (``next_shrink_s``): with no event, the working set shrinks only
  when a member's next use jumps past ``n · rebuild_s`` — its time away reaches a recorded
  duration (the median of the longer ones is then further off), passes the last one, or
  passes ``max_ttl_s``; between such instants a next use only falls.  The expected working
  set falls only when a member's time away reaches a recorded duration or passes
  ``max_ttl_s`` (between those its chance only grows, as ``e + h`` passes durations); these
  instants come often (every recorded duration), so they are tried in time order and the
  answer is the first at which the working set leaves room for the oldest waiting program
  (with nobody waiting: falls below its value at ``now``) — at most ``SHRINK_LOOKS`` of
  them, then the last one tried (an early answer only costs a question).  So a program refused
  admission stays refused until the first such instant of a member, and an engine that
  does not ask at every step (a simulator jumping over runs of steps) asks again then.
* **Eviction order**: among cached, unpinned contexts, the one whose program's next use is
  the latest goes first (ties: the latest-arrived program first); unknown or ended
  programs' contexts before any live one.  Next uses are compared as the instants the
  programs are expected back, which move only when a next use jumps: with no event the
  order changes only then (``next_order_change_s``).

Invariant (why it cannot livelock or starve; with several tenants, within each tenant —
tenant shares admit a tenant's oldest program past other tenants' older ones, and a tenant's
programs then start in arrival order while it fits its share): admitted programs are never
blocked by admission, so they run to their end — and every admitted program arrived strictly
before any refused one (cohorts are admitted whole), so a program-FCFS queue never puts a
refused program's request ahead of an admitted program's; while the oldest waiting program
is refused, nobody else is admitted (but by ``admit``: an engine's anonymous requests), so
the admitted set only shrinks; when it is empty the oldest waiting program is admitted
whatever its size (it fits: no request exceeds ``total_blocks``).  So the oldest program
waiting for admission is admitted after finitely many program ends, or after at most
``MAX_TURNS_AHEAD`` turns of one program that does not end (bounded wait), and programs
start in arrival order.  A program that never ends (its client vanished during a tool call)
still stops blocking anyone once it has been away longer than its durations (above) and at
most ``max_ttl_s``: it leaves the working set (the engine's idle memory is then used), so
admission waits at most that long on programs that do not come back.  Admission does *not*
admit the head merely because the engine is idle while admitted programs are away on short
tools: waiting for them is the point (measured: admitting then costs 11–15 % of mean JCT at
contended load, ``bench/RESULTS.md``).

Bounded state, as in ``ProgramScheduler``: a program with no live request is kept (its next
request is its return, not a new arrival); at most ``max_idle_programs`` such idle programs
are kept, the one idle longest forgotten first, shared fairly among tenants (``fair_order``;
as ``end``; counted in ``dropped_idle_programs``), so clients that vanish without ending
their program cannot grow the state without bound.

Bad input raises before any state changes, as in ``scheduler``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import struct
from typing import Any

from .._validate import finite, int_in, non_negative, tool_key
from ._sync import synchronized
from .fair_order import FairOrder
from .history import ToolHistory, back_within, global_window, tool_window
from .policy import MAX_BLOCKS, TTLPolicy, tool_history
from .scheduler import (
    DEFAULT_MAX_IDLE_PROGRAMS,
    MAX_IDLE_PROGRAMS,
    IdleCap,
    check_bool,
    check_id,
    check_ids,
)
from .tenants import check_tenant_weights, is_inferred, tenant_of

__all__ = ["MAX_PROGRAMS", "MAX_TURNS_AHEAD", "AdmissionControl"]

# How a program stands (``AdmissionControl._standing``), in eviction order: first to go first.
_GONE, _AWAY, _PRIOR, _LIVE = 0, 1, 2, 3

#: Live programs tracked at once (each is forgotten when it ends).
MAX_PROGRAMS = 1 << 20
#: Turns one admitted program may finish while the same head waits (module doc: bounded
#: wait).  Above the most seen on the agentic sessions (128, at 16 programs in flight).
MAX_TURNS_AHEAD = 256
#: Instants ``next_shrink_s`` tries under the expected working set (module doc).
SHRINK_LOOKS = 256


def _first_instant(since_s: float, elapsed_s: float, beyond: bool) -> float:
    """The first instant ``t`` from ``since_s + elapsed_s`` on whose time since ``since_s``
    (``t - since_s``, as the rules compute it) is at least ``elapsed_s`` (``beyond``: more
    than); ``inf`` if none is finite.  ``since_s + elapsed_s`` alone can round a few ulps
    short; past a few steps (near 0 the float grid is fine: ``since_s = -elapsed_s`` would take
    ~10^18 steps) the boundary is bisected over the floats' order, where ``t - since_s`` never
    falls."""

    def reached(t: float) -> bool:
        return t - since_s > elapsed_s or (not beyond and t - since_s == elapsed_s)

    t = since_s + elapsed_s
    if not math.isfinite(t):
        return math.inf
    for _ in range(_FIRST_INSTANT_STEPS):
        if reached(t):
            return t
        t = math.nextafter(t, math.inf)
    if reached(t):
        return t
    # (``t`` not reached, ``inf`` reached: the first reached float lies in between)
    lo, hi = _float_order(t), _float_order(math.inf)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reached(_float_at_order(mid)):
            hi = mid
        else:
            lo = mid
    return _float_at_order(hi)


#: ``math.nextafter`` steps ``_first_instant`` takes before it bisects.
_FIRST_INSTANT_STEPS = 4
_SIGN_CLEARED = (1 << 63) - 1


def _float_order(x: float) -> int:
    """A float's place in the floats' order (as ``f64::total_cmp``), as an integer."""
    (b,) = struct.unpack("<q", struct.pack("<d", x))
    return b ^ _SIGN_CLEARED if b < 0 else b


def _float_at_order(k: int) -> float:
    """The float at that place (``_float_order``'s inverse)."""
    (x,) = struct.unpack("<d", struct.pack("<q", k ^ _SIGN_CLEARED if k < 0 else k))
    return float(x)


class _Program:
    __slots__ = (
        "admitted",
        "arrival_s",
        "away_since_s",
        "blocks",
        "inferred",
        "live",
        "rebuild_s",
        "tenant",
        "tool",
        "turns_ahead",
        "turns_epoch",
    )

    def __init__(self, arrival_s: float, blocks: int, tenant: str) -> None:
        self.arrival_s = arrival_s
        self.blocks = blocks
        self.tenant = tenant
        self.inferred = False  # its id says an engine inferred it (``tenants.is_inferred``)
        self.rebuild_s = 0.0
        self.admitted = False
        self.live = 0  # waiting and running requests
        self.tool: str | None = None
        self.away_since_s: float | None = None  # set while no request is live
        # turns finished while the head of refusal episode ``turns_epoch`` waited
        self.turns_ahead = 0
        self.turns_epoch = 0


class _Tenant:
    """A tenant of known programs: how many (it is active while it has any), its weight, and
    its programs not yet admitted, (arrival, id), oldest first (stale entries skipped
    lazily, as in ``AdmissionControl._pending``)."""

    __slots__ = ("pending", "programs", "weight")

    def __init__(self, weight: int) -> None:
        self.programs = 0
        self.weight = weight
        self.pending: list[tuple[float, str]] = []


@synchronized
class AdmissionControl(IdleCap):
    """Working-set admission and next-use eviction order over a ``TTLPolicy``'s tool-gap
    statistics (read, never copied)."""

    def __init__(
        self,
        policy: Any,
        total_blocks: Any,
        max_idle_programs: Any = DEFAULT_MAX_IDLE_PROGRAMS,
        tenant_weights: Any = None,
    ) -> None:
        history = tool_history(policy)
        if history is None or not callable(getattr(policy, "decide", None)):
            raise TypeError(f"policy must be a TTLPolicy, got {type(policy).__name__}")
        self._policy = policy
        # what the rules read of it, taken once: its config is fixed, its history the one it feeds
        self._config = policy.config
        self._history = history
        self._total_blocks = int_in("total_blocks", total_blocks, 1, MAX_BLOCKS)
        self._max_idle_programs = int_in(
            "max_idle_programs", max_idle_programs, 0, MAX_IDLE_PROGRAMS
        )
        self._weights = check_tenant_weights(tenant_weights)
        self._tenants: dict[str, _Tenant] = {}  # the active ones: with a known program
        self._tenants_weight = 0  # their summed weight
        self._dropped_idle_programs = 0
        self._idle = FairOrder()  # no live request, idle longest first (fair_order.py)
        self._programs: dict[str, _Program] = {}
        self._pending: list[tuple[float, str]] = []  # (arrival, id) not yet admitted; lazy
        self._admitted: set[str] = set()  # the working set is summed over these only
        self._now = -math.inf
        # The head last refused, (arrival, id), while it waits; its episode's number; whether
        # an admitted program has run MAX_TURNS_AHEAD turns ahead of it (module doc).
        self._refused: tuple[float, str] | None = None
        self._refusal_epoch = 0
        self._head_due = False

    # -- checks ---------------------------------------------------------------------------
    def _check_now(self, now: Any) -> float:
        t = finite("now", now) + 0.0
        if t < self._now:
            raise ValueError(f"now must be >= {self._now!r} (time never goes back), got {t!r}")
        return t

    def _program(self, program_id: Any) -> tuple[str, _Program]:
        pid = check_id("program_id", program_id)
        prog = self._programs.get(pid)
        if prog is None:
            raise KeyError(f"unknown program_id: {pid!r}")
        return pid, prog

    # -- events ---------------------------------------------------------------------------
    def arrive(self, program_id: Any, now: Any, blocks_needed: Any) -> None:
        """A request of the program arrives (its first one makes the program known)."""
        self._arrive_checked(*self._check_arrive(program_id, now, blocks_needed))

    def _arrive_checked(self, pid: str, t: float, blocks: int) -> None:
        """``arrive`` with what ``_check_arrive`` returned (nothing changed in between)."""
        prog = self._programs.get(pid)
        if prog is None:
            prog = self._programs[pid] = _Program(t, blocks, tenant_of(pid))
            prog.inferred = is_inferred(pid)
            heapq.heappush(self._pending, (t, pid))
            self._compact_pending(self._pending, len(self._programs))
            tenant = self._tenants.get(prog.tenant)
            if tenant is None:
                tenant = self._tenants[prog.tenant] = _Tenant(self._weights.get(prog.tenant, 1))
                self._tenants_weight += tenant.weight
            tenant.programs += 1
            heapq.heappush(tenant.pending, (t, pid))
            self._compact_pending(tenant.pending, tenant.programs)
        self._idle.discard(pid)
        prog.blocks = max(prog.blocks, blocks)
        prog.live += 1
        prog.away_since_s = None
        self._now = t

    def _check_arrive(
        self, program_id: Any, now: Any, blocks_needed: Any
    ) -> tuple[str, float, int]:
        """Raises what ``arrive`` would, changing nothing (``ProgramLifecycle`` asks it before
        the scheduler takes the request, so that a refusal leaves both parts as they were);
        else the checked (program_id, now, blocks_needed)."""
        pid = check_id("program_id", program_id)
        t = self._check_now(now)
        blocks = int_in("blocks_needed", blocks_needed, 0, self._total_blocks)
        if pid not in self._programs and len(self._programs) >= MAX_PROGRAMS:
            raise ValueError(
                f"program_id must be one of at most {MAX_PROGRAMS} tracked programs; end "
                f"some first, got {pid!r} (a new program)"
            )
        return pid, t, blocks

    def _check_finish(
        self,
        program_id: Any,
        now: Any,
        blocks_held: Any,
        tool: Any = None,
        rebuild_s: Any = 0.0,
        last_turn: Any = False,
    ) -> None:
        """Raises what ``finish`` would, changing nothing (``ProgramLifecycle`` asks it before
        the scheduler commits a finish, so that a refusal leaves both parts as they were)."""
        tool_key(tool)
        check_bool("last_turn", last_turn)
        pid, prog = self._program(program_id)
        self._check_now(now)
        int_in("blocks_held", blocks_held, 0, self._total_blocks)
        non_negative("rebuild_s", rebuild_s)
        if prog.live == 0:
            raise ValueError(f"program_id must be a program with a live request, got {pid!r}")

    def finish(
        self,
        program_id: Any,
        now: Any,
        blocks_held: Any,
        tool: Any = None,
        rebuild_s: Any = 0.0,
        last_turn: Any = False,
    ) -> None:
        """A request of the program ended holding ``blocks_held`` blocks, with a call to
        ``tool`` (None: no tool); ``rebuild_s`` is what losing its context would cost.  A
        last turn ends the program."""
        key = tool_key(tool)
        last = check_bool("last_turn", last_turn)
        pid, prog = self._program(program_id)
        t = self._check_now(now)
        blocks = int_in("blocks_held", blocks_held, 0, self._total_blocks)
        rebuild = non_negative("rebuild_s", rebuild_s)
        if prog.live == 0:
            raise ValueError(f"program_id must be a program with a live request, got {pid!r}")
        self._now = t
        if last:
            self._end(pid, prog)
            return
        prog.blocks = max(prog.blocks, blocks)
        prog.rebuild_s = rebuild
        prog.live -= 1
        if prog.admitted and self._refused is not None:
            self._turn_ahead(prog)
        if prog.live == 0:
            prog.tool, prog.away_since_s = key, t
            # room first (``fair_order``: what goes is chosen as the program is about to join)
            while self._idle and len(self._idle) >= self._max_idle_programs:
                gone = self._idle.victim(prog.tenant)
                self._end(gone, self._programs[gone])
                self._dropped_idle_programs += 1
            if not self._max_idle_programs:  # (no room at all: it goes itself)
                self._end(pid, prog)
                self._dropped_idle_programs += 1
                return
            self._idle.touch(pid)

    def _turn_ahead(self, prog: _Program) -> None:
        """An admitted program finished a turn while the head last refused waits."""
        if prog.turns_epoch != self._refusal_epoch:
            prog.turns_epoch, prog.turns_ahead = self._refusal_epoch, 0
        prog.turns_ahead += 1
        if prog.turns_ahead >= MAX_TURNS_AHEAD:
            self._head_due = True

    def end(self, program_id: Any) -> None:
        """The program ended (or was aborted): forget it."""
        pid, prog = self._program(program_id)
        self._end(pid, prog)

    def _end(self, pid: str, prog: _Program) -> None:
        if prog.admitted:
            self._admitted.discard(pid)
        self._idle.discard(pid)
        del self._programs[pid]  # its _pending entries, if any, are skipped lazily
        tenant = self._tenants[prog.tenant]
        tenant.programs -= 1
        if tenant.programs == 0:
            del self._tenants[prog.tenant]
            self._tenants_weight -= tenant.weight

    # -- the rules ------------------------------------------------------------------------
    def _samples(self, tenant: str, tool: str) -> list[float]:
        """The sorted durations a program of ``tenant`` away on ``tool`` is judged by (see the
        module doc)."""
        return history_samples(self._history, self._config.min_tool_samples, tool, tenant)

    def _away_limit_s(self, prog: _Program, samples: list[float]) -> float:
        """How long ``prog`` away, judged by ``samples``, may stay expected back: see
        ``away_limit_s``."""
        return away_limit_s(self._config, samples, prog.inferred)

    def _standing(self, prog: _Program, t: float) -> tuple[int, float]:
        """The program's kind at ``t`` (``_LIVE``, ``_GONE``: not expected back, ``_PRIOR``:
        away with no duration recorded, ``_AWAY``) and, away, the median of its tool's
        durations longer than its time away (nearest rank); else 0.  Both its next use and
        its place in the eviction order follow from these."""
        if prog.live > 0:
            return (_LIVE, 0.0)
        since = prog.away_since_s
        if prog.tool is None or since is None:
            return (_GONE, 0.0)
        samples = self._samples(prog.tenant, prog.tool)
        if t - since > self._away_limit_s(prog, samples):
            return (_GONE, 0.0)
        n = len(samples)
        if n == 0:
            return (_PRIOR, 0.0)
        k = bisect.bisect_right(samples, t - since)
        if k == n:
            return (_GONE, 0.0)
        return (_AWAY, samples[k + (n - k + 1) // 2 - 1])

    def _next_use(self, prog: _Program, t: float) -> float:
        kind, median = self._standing(prog, t)
        if kind == _AWAY:
            return median - (t - prog.away_since_s)  # type: ignore[operator]
        if kind == _PRIOR:
            return self._config.prior_mean_s * math.log(2.0)
        return 0.0 if kind == _LIVE else math.inf

    def next_use_s(self, program_id: Any, now: Any) -> float:
        """Expected seconds until the program uses its context again (see the module doc);
        ``inf`` for an unknown program."""
        pid = check_id("program_id", program_id)
        t = self._check_now(now)
        prog = self._programs.get(pid)
        return math.inf if prog is None else self._next_use(prog, t)

    def _leave_s(self, prog: _Program, t: float, limit_s: float) -> float:
        """When a program of the working set at ``t`` (next use ``<= limit_s``) first leaves
        it with no event in between; ``inf`` if it never does.  Between two recorded
        durations its next use only falls (the same median, nearer); it jumps up only when
        its time away reaches a recorded duration (the median of the longer ones cannot be
        shorter), or becomes ``inf`` past the last one or past ``max_ttl_s``."""
        since = prog.away_since_s
        if prog.live > 0 or prog.tool is None or since is None:
            return math.inf
        samples = self._samples(prog.tenant, prog.tool)
        max_ttl_s = self._away_limit_s(prog, samples)
        leave = _first_instant(since, max_ttl_s, beyond=True)
        n = len(samples)
        k = bisect.bisect_right(samples, t - since)
        while k < n:
            d = samples[k]
            if d > max_ttl_s:
                break
            k = bisect.bisect_right(samples, d, k)  # the durations <= d, once d is reached
            if k == n or samples[k + (n - k + 1) // 2 - 1] - d > limit_s:
                reached = _first_instant(since, d, beyond=False)
                return reached if reached < leave else leave
        return leave

    def next_shrink_s(self, now: Any) -> float:
        """The first instant after ``now`` at which the working set may shrink with no event
        (``arrive``, ``finish``, ``end``, a recorded tool duration) in between: an admitted
        program away on a tool leaves it (see ``_leave_s``); ``inf`` if none will.  Under the
        expected working set: the first instant it may leave room for the oldest waiting
        program (see the module doc).

        Until then a program that ``may_run`` refuses at ``now`` stays refused: no member of
        the working set leaves, and only members leave it without an event.  An engine that
        steps by events (a simulator) asks ``may_run`` again then; one that asks at every
        step needs nothing."""
        t = self._check_now(now)
        if self._config.expected_working_set:
            return self._expected_shrink_s(t)
        first = math.inf
        for pid in self._admitted:
            prog = self._programs[pid]
            limit_s = self._horizon_s(prog)
            if self._next_use(prog, t) <= limit_s:
                leave = self._leave_s(prog, t, limit_s)
                if leave < first:
                    first = leave
        return first

    def _room_blocks(self, t: float) -> int:
        """The working set at which the oldest waiting program is admitted (equal arrivals:
        the smallest of them), or, with nobody waiting, one block below the working set at
        ``t``."""
        admitted = len(self._admitted)
        oldest = [p for p in self._programs.values() if not p.admitted]
        if not oldest or not admitted:
            return self._working_set(t) - 1
        first_s = min(p.arrival_s for p in oldest)
        mean = sum(self._programs[a].blocks for a in self._admitted) // admitted
        need = min(max(p.blocks, mean) for p in oldest if p.arrival_s == first_s)
        return self._total_blocks - need

    def _fall_s(self, prog: _Program, after_s: float) -> float:
        """The first instant after ``after_s`` at which a member's share of the expected
        working set may fall with no event: its time away reaches the next recorded
        duration, or passes ``max_ttl_s``; ``inf`` when it is live or not expected back."""
        since = prog.away_since_s
        if prog.live > 0 or prog.tool is None or since is None:
            return math.inf
        samples = self._samples(prog.tenant, prog.tool)
        max_ttl_s = self._away_limit_s(prog, samples)
        if after_s - since > max_ttl_s:
            return math.inf
        leave = _first_instant(since, max_ttl_s, beyond=True)
        if not samples:
            return leave  # the prior's share is constant until then
        k = bisect.bisect_right(samples, after_s - since)
        if k == len(samples):
            return math.inf  # past every record: counts nothing until an event
        reached = _first_instant(since, samples[k], beyond=False)
        return reached if reached < leave else leave

    def _expected_shrink_s(self, t: float) -> float:
        """``next_shrink_s`` under the expected working set (module doc)."""
        members = [self._programs[p] for p in self._admitted]
        if len(self._tenants) > 1:  # any member's fall may make room in its tenant's share
            return min((self._fall_s(prog, t) for prog in members), default=math.inf)
        room = self._room_blocks(t)
        at = t
        for _ in range(SHRINK_LOOKS):
            at = min((self._fall_s(prog, at) for prog in members), default=math.inf)
            if at == math.inf or self._working_set(at) <= room:
                return at
        return at

    def _horizon_s(self, prog: _Program) -> float:
        """How soon a member must be back to be worth keeping: ``n · rebuild_s``, scaled."""
        cfg = self._config
        return prog.rebuild_s * float(len(self._admitted)) * cfg.working_set_horizon_scale

    def _expected_blocks(self, prog: _Program, t: float, horizon_s: float) -> int:
        """A member's share of the expected working set (see the module doc)."""
        kind, _ = self._standing(prog, t)
        if kind == _LIVE:
            return prog.blocks
        if kind == _PRIOR:
            return prog.blocks if self._next_use(prog, t) <= horizon_s else 0
        if kind == _GONE:
            return 0
        samples = self._samples(prog.tenant, prog.tool)  # type: ignore[arg-type]
        elapsed = t - prog.away_since_s  # type: ignore[operator]
        within, longer = back_within(samples, elapsed, horizon_s)
        return -(-prog.blocks * within // longer)

    def _working_set(self, t: float) -> int:
        return self._load(t)[0]

    def _load(self, t: float) -> tuple[int, int]:
        """(working set, summed footprint) of the admitted programs, in one pass."""
        working, total, _ = self._load_of(t, None)
        return working, total

    def _load_of(self, t: float, tenant: str | None) -> tuple[int, int, int]:
        """(working set, summed footprint, count) of the admitted programs (of ``tenant``
        only, when given), in one pass."""
        expected = self._config.expected_working_set
        working = total = count = 0
        for pid in self._admitted:
            prog = self._programs[pid]
            if tenant is not None and prog.tenant != tenant:
                continue
            count += 1
            total += prog.blocks
            horizon_s = self._horizon_s(prog)
            if expected:
                working += self._expected_blocks(prog, t, horizon_s)
            elif self._next_use(prog, t) <= horizon_s:
                working += prog.blocks
        return working, total, count

    def working_set_blocks(self, now: Any) -> int:
        """The working set at ``now`` (see the module doc)."""
        return self._working_set(self._check_now(now))

    def _compact_pending(self, pending: list[tuple[float, str]], current_at_most: int) -> None:
        """Drops ``pending``'s stale entries (those ``_head`` drops) once they outnumber the
        programs that could be current: a queue's head is only looked at when a program
        waits, so without this each program ever seen left an entry."""
        if len(pending) > 2 * current_at_most + 16:
            pending[:] = [(a, p) for a, p in pending if self._pending_current(a, p)]
            heapq.heapify(pending)

    def _pending_current(self, arrival: float, pid: str) -> bool:
        prog = self._programs.get(pid)
        return prog is not None and not prog.admitted and prog.arrival_s == arrival

    def _head(self, pending: list[tuple[float, str]] | None = None) -> str | None:
        """The oldest program not yet admitted (of ``pending``: a tenant's; default all)."""
        pending = self._pending if pending is None else pending
        while pending:
            arrival, pid = pending[0]
            # stale: admitted since, ended, or ended and back as a new program
            if self._pending_current(arrival, pid):
                return pid
            heapq.heappop(pending)
        return None

    def _cohort_admitted(self, arrival_s: float) -> bool:
        """Is a program that arrived at ``arrival_s`` already admitted?"""
        return any(self._programs[a].arrival_s == arrival_s for a in self._admitted)

    def may_run(self, program_id: Any, now: Any) -> bool:
        """May a request of the program be scheduled now?  True for an admitted program;
        for the oldest program not yet admitted, admits it (and says True) when the rule
        allows; False otherwise."""
        pid, prog = self._program(program_id)
        t = self._check_now(now)
        self._now = t
        if prog.admitted:
            return True
        head = self._head()
        if head is None or self._programs[head].arrival_s < prog.arrival_s:
            # an older program waits for admission (equal arrivals: any of them); it holds
            # back no other tenant's program within that tenant's share
            if not self._within_share(prog, t):
                return False
            self._admit(pid, prog)
            return True
        n = len(self._admitted)
        if n and not self._cohort_admitted(prog.arrival_s):
            # Expected footprint: its own, or the admitted programs' mean when larger (not
            # beside a lone program in flight: bounded wait, module doc).
            working, total = self._load(t)
            mean = 0 if self._alone_in_flight() else total // n
            if (
                working + max(prog.blocks, mean) > self._total_blocks
                and not (self._head_due and self._refused == (prog.arrival_s, pid))
                and not self._within_share(prog, t)
            ):
                if self._refused != (prog.arrival_s, pid):  # a new wait: count turns anew
                    self._refused = (prog.arrival_s, pid)
                    self._refusal_epoch += 1
                    self._head_due = False
                return False
        self._admit(pid, prog)
        return True

    def _within_share(self, prog: _Program, t: float) -> bool:
        """Is the program its tenant's oldest waiting one (equal arrivals: any), fitting its
        tenant's share of ``total_blocks`` beside its tenant's working set (module doc,
        "Tenant shares")?  False with one active tenant: the rule above is then the same."""
        if len(self._tenants) < 2:
            return False
        tenant = self._tenants[prog.tenant]
        head = self._head(tenant.pending)
        if head is None or self._programs[head].arrival_s < prog.arrival_s:
            return False
        working, total, count = self._load_of(t, prog.tenant)
        need = working + max(prog.blocks, total // count if count else 0)
        return need * self._tenants_weight <= self._total_blocks * tenant.weight

    def _alone_in_flight(self) -> bool:
        """Is one program admitted, with a live request (bounded wait, module doc)?"""
        if len(self._admitted) != 1:
            return False
        return self._programs[next(iter(self._admitted))].live > 0

    def _admit(self, pid: str, prog: _Program) -> None:
        prog.admitted = True  # its _pending entry is skipped lazily
        self._admitted.add(pid)
        if self._refused == (prog.arrival_s, pid):
            self._refused, self._head_due = None, False

    def admit(self, program_id: Any, now: Any) -> None:
        """Admit the program now, whatever the working set: for requests load control must
        not hold back (an engine's anonymous one-request programs, served as stock).  Its
        footprint counts in the working set from now on, as any admitted program's."""
        pid, prog = self._program(program_id)
        self._now = self._check_now(now)
        if not prog.admitted:
            self._admit(pid, prog)

    def eviction_order(self, program_ids: Any, now: Any) -> list[str]:
        """``program_ids`` (programs whose cached contexts may be evicted) sorted so that the
        first should go first: latest next use first, then latest-arrived program first;
        unknown programs first of all, in the order given."""
        ids = check_ids("program_ids", program_ids)
        t = self._check_now(now)
        self._now = t
        unknown = [p for p in ids if p not in self._programs]
        known = [p for p in ids if p in self._programs]
        return unknown + self._sorted(known, t)

    def _place(self, prog: _Program, t: float) -> tuple[int, float]:
        """Where a program stands in the eviction order at ``t``, by itself (smallest first):
        not expected back; away, by the latest expected return instant (the time it left
        plus the median of the longer durations: its next use is that instant minus ``t``,
        so this is the latest next use first, with no float drift between programs); away on
        the prior (one next use for all, and only while no duration is recorded: never
        beside a program of the previous kind); live (next use 0)."""
        kind, median = self._standing(prog, t)
        if kind == _AWAY:
            return (_AWAY, -(prog.away_since_s + median))  # type: ignore[operator]
        return (kind, 0.0)

    def _sorted(self, known: list[str], t: float) -> list[str]:
        """Known programs in eviction order at ``t``: by place, then latest arrival, then id."""
        progs = self._programs
        return sorted(known, key=lambda p: (*self._place(progs[p], t), -progs[p].arrival_s, p))

    def next_order_change_s(self, program_ids: Any, now: Any, until_s: Any) -> float:
        """The first instant in ``(now, until_s]`` at which ``eviction_order(program_ids, ·)``
        differs from its answer at ``now`` with no event in between; ``inf`` if none (it
        looks no further than ``until_s``).  Moves no clock.

        Only a jump of a next use changes the order: between jumps every finite next use of
        a program away falls at the clock's pace — its expected return instant stays put —
        and never meets a constant one (0 for a live request, ``inf``; the prior's constant
        applies only while no duration is recorded at all, when none falls).  A next use
        jumps when its time away reaches a recorded duration or passes ``max_ttl_s``; the
        order is compared at each such instant, in time order.  An engine that jumps over
        runs of steps evicts in the order of each step's start by asking this."""
        ids = check_ids("program_ids", program_ids)
        t = self._check_now(now)
        until = finite("until_s", until_s)
        progs = self._programs
        known = [p for p in ids if p in progs]  # unknown programs go first, in a fixed order
        if len(known) < 2 or until <= t:
            return math.inf
        jumps: set[float] = set()
        for p in known:
            prog = progs[p]
            since = prog.away_since_s
            if prog.live > 0 or prog.tool is None or since is None:
                continue  # a constant next use: 0, or inf from now on
            samples = self._samples(prog.tenant, prog.tool)  # none: the prior's constant
            max_ttl_s = self._away_limit_s(prog, samples)
            if t - since > max_ttl_s:
                continue  # inf from now on
            leave = _first_instant(since, max_ttl_s, beyond=True)
            if leave <= until:
                jumps.add(leave)
            k = bisect.bisect_right(samples, t - since)
            while k < len(samples):
                d = samples[k]
                at = _first_instant(since, d, beyond=False)
                if at > until or at >= leave:
                    break
                jumps.add(at)
                k = bisect.bisect_right(samples, d, k)  # past the durations equal to d
        before = self._sorted(known, t)
        for at in sorted(jumps):
            if self._sorted(known, at) != before:
                return at
        return math.inf

    # -- views ----------------------------------------------------------------------------
    def knows(self, program_id: Any) -> bool:
        """Whether the program is tracked (arrived, not ended, not forgotten while idle)."""
        return check_id("program_id", program_id) in self._programs

    def admitted(self, program_id: Any) -> bool:
        """Whether the program is admitted (False for an unknown program)."""
        prog = self._programs.get(check_id("program_id", program_id))
        return prog is not None and prog.admitted

    @property
    def policy(self) -> TTLPolicy:
        """The ``TTLPolicy`` whose tool-gap statistics it reads (the very object given)."""
        return self._policy

    @property
    def total_blocks(self) -> int:
        """The engine's KV blocks, the working set's capacity."""
        return self._total_blocks

    @property
    def admitted_count(self) -> int:
        """Programs admitted (in the working set)."""
        return len(self._admitted)

    @property
    def program_count(self) -> int:
        """Programs known (arrived, not ended, not forgotten while idle)."""
        return len(self._programs)

    @property
    def waiting_count(self) -> int:
        """Programs known and not yet admitted."""
        return len(self._programs) - len(self._admitted)


def away_limit_s(config: Any, samples: list[float], inferred: bool = False) -> float:
    """How long a program away may stay expected back (module doc, "Next use"):
    ``max_ttl_s``; on the prior (no duration recorded) at most ``prior_mean_s · (1 +
    ln(window))`` as well — the longest of ``window`` draws of the prior is about that (its
    expectation, ``prior_mean_s · H(window)``, is at most it), so a program away longer has
    outlasted the durations the prior stands for, as one past its last recorded duration.
    An ``inferred`` program: at most ``inferred_away_limit_s`` as well."""
    if samples:
        limit_s = config.max_ttl_s
    else:
        limit_s = min(config.max_ttl_s, config.prior_mean_s * (1.0 + math.log(config.window)))
    if inferred:
        return min(limit_s, inferred_away_limit_s(config, samples))
    return limit_s


def inferred_away_limit_s(config: Any, samples: list[float]) -> float:
    """How long an inferred program away may stay expected back, besides ``away_limit_s``'s
    bounds (module doc, "Next use"): the ``inferred_away_quantile`` of ``samples`` (sorted;
    nearest rank, at least the first), or on the prior (none) its quantile
    ``-prior_mean_s · ln(1 - q)``; ``inf`` when the quantile is 1."""
    q = config.inferred_away_quantile
    if q >= 1.0:
        return math.inf
    if samples:
        rank = math.ceil(q * len(samples))
        return samples[rank - 1 if rank > 0 else 0]
    return -config.prior_mean_s * math.log(1.0 - q)


def away_samples(policy: Any, tool: Any, tenant: Any = "") -> list[float]:
    """The sorted durations a program of ``tenant`` away on ``tool`` is judged by: the tenant's
    window of ``tool`` once it holds ``min_tool_samples`` (at least one), else the global one
    (see the module doc).  ``policy`` is a reference ``TTLPolicy``."""
    history = tool_history(policy)
    if history is None:
        raise TypeError(f"policy must be a reference TTLPolicy, got {type(policy).__name__}")
    return history_samples(history, policy.config.min_tool_samples, tool, tenant)


def history_samples(
    history: ToolHistory, min_tool_samples: int, tool: Any, tenant: Any = ""
) -> list[float]:
    """``away_samples`` of the policy whose durations ``history`` holds and whose config sets
    ``min_tool_samples``."""
    window = tool_window(history, tool, tenant)
    if window is None or len(window) < max(min_tool_samples, 1):
        window = global_window(history)
    return window.sorted
