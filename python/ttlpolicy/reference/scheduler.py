"""Program-level scheduling state of CacheTTL: the waiting queue and the pin table.

Engine-agnostic bookkeeping that the simulator and the engine adapters call instead of
re-implementing it.  The engine owns the KV blocks; the scheduler says which request runs
next, which program keeps how many blocks until when, and what to release under pressure.

Life of a request: ``arrive`` (waiting) → ``pop`` (running) → ``preempt`` (waiting again,
first in line) or ``finish``.  ``finish`` asks the policy how long to pin the blocks the
request holds (unless it was the program's last turn) and pins them if the pin budget allows.
A pin ends at ``expire`` (deadline passed), ``reclaim`` (memory pressure, latest-arrived
program first), when the program's next request ``arrive``s (the pin is consumed: its blocks
become that request's prefix and the request jumps ahead), or when the program ends.

Choices (the same in both backends):

* Ids are ``str`` (engines name requests with strings): non-empty, valid Unicode (no lone
  surrogates), at most ``MAX_ID_BYTES`` bytes of UTF-8.  Request ids order ties by code point.
* Program-level FCFS orders programs by the order in which they were first seen (0, 1, …),
  which follows first arrival since time never goes backwards: programs that arrive at one
  ``now`` (a batch, a simulator's start) are not interleaved request by request — each keeps
  its place, as on any real clock — and the pin reclaim order (latest first) uses it too.
* Time is an argument and never goes backwards: every call taking ``now`` refuses a ``now``
  below the latest one seen.
* ``mean_active_blocks`` (M̄ of the cost model) is tracked: the mean ``blocks_held`` over the
  last ``MEAN_ACTIVE_WINDOW`` finished requests, this one included, at least 1 block.  An
  engine that knows better passes ``mean_active_blocks=`` to ``finish``.
* Tool durations: when a request finishes with a tool (or gets pinned), the program's next
  arrival records ``now − finish time`` as that tool's duration (``policy.observe_tool``) —
  for every program, pinned or not, so the CDF is not biased towards short tools.
* Out-of-order cost T: when a request whose program had finished a turn but whose cache was
  not kept (no pin consumed on arrival) is first popped, its wait in the queue is observed
  (``policy.observe_queueing_delay``).
* η: ``end_program`` and ``finish(last_turn=True)`` observe the program's finished turns;
  ``abort`` does not (a cut-short program would bias η towards memoryless).
* A program may have several live requests (parallel calls); it holds at most one pin, and a
  second pinned finish merges into it (blocks add up, the later deadline wins).  A last turn
  ends the program, dropping its other live requests; ``abort`` ends the request's whole
  program (its client went away).  Every ended program's pin and requests are returned, so
  the engine can free their blocks.
* A pin lasts until a call removes it: past its deadline it is still consumed by an
  ``arrive`` if ``expire`` has not released it yet (engines call ``expire`` every step).
* ``policy.config.pin_handover`` (read once, at construction) says when a pin passes to
  the program's next request.  ``"arrival"`` (the default): on ``arrive``, as above.
  ``"schedule"`` (the CacheTTL paper's rule, ``PolicyConfig.published()``): on ``pop`` —
  until then the pin stays in the table and the program's waiting requests rank as pinned
  (a pin released under them, by ``reclaim``, drops them back to FCFS); ``expire`` releases
  a pin only when ``now > deadline`` and no request of its program waits; the popped request
  is a returning one (T is observed) exactly when its program held no pin.  An engine learns
  of the handover from ``pin(program_id)`` before ``pop`` (the blocks stay where they are).
* Bounded state: a program that is idle (no live request, no pin) is kept so that its next
  request is known as a return; at most ``max_idle_programs`` are kept, the one idle longest
  forgotten first, shared fairly among tenants (``fair_order``: a tenant's program going idle
  at the cap makes its own idle longest go if it holds more than that one's tenant) — as if
  aborted: no η observation, its open tool gap not observed — counted in
  ``dropped_idle_programs``.  An engine that never ends its programs holds bounded memory.
* Queue age is bounded: a program idle (no live request, no pin) longer than
  ``policy.config.max_ttl_s`` — longer than any pin of the policy lasts — returns as a new
  program: its FCFS place (rank and program order; also the pin reclaim order) becomes that
  of a new arrival, so a client that never sent ``last_turn`` is not served before programs
  that came since.  What the program has done is kept: its turns (η), its attained service
  and its open tool gap, which is still observed (the CDF needs the long gaps, or it would
  favour pinning).
* ``policy.config.serve_order`` (read once, at construction) orders returning calls (those
  of a program that has finished a turn) after the preempted and pinned ones.
  ``"program"`` (the default): program-level FCFS, by program arrival.  ``"attained"``:
  by ``arrival + attained`` — the request's arrival delayed by the engine seconds its
  program has had (``pop`` to ``finish`` or ``preempt``, summed over its requests, read
  when the request is queued): least attained service, with a second of waiting worth a
  second of service, so a request queued at rank ``r`` runs before any request arriving
  after ``r`` (its wait is bounded; nobody starves).  For engines whose lost cache is a
  cheap reload (an offload tier): there serving the least-served program first shortens
  the mean when programs' lengths are heavy-tailed, while without a tier it spreads memory
  over more contexts and re-prefills the longest (bench/RESULTS.md, "Serving order at the
  onset" and "With a tier, returning calls by attained service").
  First calls rank after every returning call, by program arrival, in both orders (an
  engine that stops at a head refused admission never blocks an admitted program's call);
  preempted calls resume by program arrival.
* Threads: each call is atomic (see ``_sync``).  ``policy`` must be a ``TTLPolicy`` of the
  same backend (not any object with a ``decide``): the native scheduler drives its policy's
  core directly, so both backends refuse other objects alike.
* Bad input raises before any state changes: ``TypeError`` (wrong type), ``ValueError`` (bad
  value, wrong state, time going backwards), ``KeyError`` (unknown id).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, SupportsFloat, SupportsIndex, TypedDict

from .._validate import (
    check_id,
    check_ids,
    finite,
    i64_field,
    id_field,
    instance_or_none,
    int_in,
    non_negative,
    positive,
    seq_items,
    tool_key,
    unchecked,
)
from ._sync import synchronized
from .fair_order import FairOrder
from .pins import Pin, PinTable
from .policy import MAX_BLOCKS, PinDecision, TTLPolicy
from .queue import Key, WaitingQueue
from .tenants import check_tenant_weights, tenant_of

__all__ = ["Ended", "Finished", "Pin", "ProgramScheduler", "TurnEnd"]

MEAN_ACTIVE_WINDOW = 256
#: η is observed on at most this many turns (the estimator's own bound).
MAX_TURNS = 1_000_000
DEFAULT_MAX_IDLE_PROGRAMS = 1 << 16
MAX_IDLE_PROGRAMS = 1 << 32


@dataclass(frozen=True, slots=True)
class Ended:
    """A program that ended: its finished ``turns``, the ``pin`` released (if any) and the
    live requests dropped with it (``request_ids``, sorted)."""

    program_id: str
    turns: int
    pin: Pin | None
    request_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        # a caller's values checked as the native class converts them (its maker's: unchecked)
        object.__setattr__(self, "program_id", id_field("program_id", self.program_id))
        object.__setattr__(self, "turns", i64_field("turns", self.turns))
        instance_or_none("pin", "a Pin", self.pin, Pin)
        object.__setattr__(
            self, "request_ids", tuple(map(str.__str__, check_ids("request_ids", self.request_ids)))
        )


@dataclass(frozen=True, slots=True)
class Finished:
    """What ``finish`` did: the policy's ``decision`` (None on a last turn), the program's
    ``pin`` if this request was pinned (merged with a pin the program already held),
    ``ended`` when it was the program's last turn, and the pins of other tenants ``released``
    to make room for it within its share (the engine frees their blocks)."""

    decision: PinDecision | None
    pin: Pin | None
    ended: Ended | None
    released: tuple[Pin, ...] = ()

    def __post_init__(self) -> None:
        # a caller's values checked as the native class converts them (its maker's: unchecked)
        instance_or_none("decision", "a PinDecision", self.decision, PinDecision)
        instance_or_none("pin", "a Pin", self.pin, Pin)
        instance_or_none("ended", "an Ended", self.ended, Ended)
        released = () if self.released is None else seq_items("released", "Pin", self.released)
        for pin in released:
            if not isinstance(pin, Pin):
                raise TypeError(f"released must be a sequence of Pin, got {type(pin).__name__}")
        object.__setattr__(self, "released", tuple(released))

    @property
    def pinned(self) -> bool:
        """Whether this request was pinned (``pin`` is not None)."""
        return self.pin is not None


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """What an engine tells ``finish`` about a turn's end, besides which request ended, when,
    and how many blocks it holds.  One object on its way from the engine to the core: the
    scheduler's and the lifecycle's ``finish`` (both backends) take it whole, or its fields
    as keywords.  A field added here is added to the core's ``TurnEnd``
    (rust/src/scheduler/mod.rs) and the binding's ``TURN_END`` (bindings/src/turn_end.rs):
    three files (docs/design.md, "A turn's end").

    Not checked when built: ``finish`` checks each field as it checks every untrusted
    argument — ``tool``'s and ``last_turn``'s types before anything else, the values after
    the request id, ``now`` and ``blocks_held``, in field order."""

    #: The tool the request called (None: unknown or none); untrusted, cut to its cap.
    tool: str | None = None
    #: The program's last turn: it ends the program (no pin, η observed).
    last_turn: bool = False
    #: Seconds a miss of this context would cost, if the engine knows (else the model's).
    cache_miss_cost_s: SupportsFloat | None = None
    #: Tokens of the request's prefix (for the model's miss cost).
    prefix_tokens: SupportsIndex = 0
    #: Of those, tokens an offload tier holds (a cheaper miss).
    offloaded_tokens: SupportsIndex = 0
    #: M̄ of the cost model, if the engine knows (else the tracked one).
    mean_active_blocks: SupportsFloat | None = None


class TurnEndFields(TypedDict, total=False):
    """``TurnEnd``'s fields as ``finish``'s keywords, for type checkers (the same names and
    types: tests/scheduler/test_turn_end.py)."""

    tool: str | None
    last_turn: bool
    cache_miss_cost_s: SupportsFloat | None
    prefix_tokens: SupportsIndex
    offloaded_tokens: SupportsIndex
    mean_active_blocks: SupportsFloat | None


TURN_END_FIELDS = tuple(f.name for f in dataclasses.fields(TurnEnd))


def turn_end(turn: Any, keywords: dict[str, Any]) -> TurnEnd:
    """``finish``'s ``turn``, or its keywords as one: refused (``TypeError``) a ``turn`` that
    is not a ``TurnEnd``, both forms at once, a keyword that names no field."""
    if turn is None:
        for name in keywords:
            if name not in TURN_END_FIELDS:
                raise TypeError(f"finish() got an unexpected keyword argument {name!r}")
        return TurnEnd(**keywords)
    if not isinstance(turn, TurnEnd):
        raise TypeError(f"turn must be a TurnEnd or None, got {type(turn).__name__}")
    if keywords:
        raise TypeError(
            f"finish() takes a TurnEnd or its fields as keywords, not both, got turn and "
            f"{next(iter(keywords))!r}"
        )
    return turn


def check_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{field} must be a bool, got {type(value).__name__}")
    return value


class IdleCap:
    """The bound on idle programs remembered, kept by ``ProgramScheduler`` and
    ``AdmissionControl`` alike: its read-only views (one int each, read without the lock)."""

    _max_idle_programs: int
    _dropped_idle_programs: int

    @property
    def max_idle_programs(self) -> int:
        """The most idle programs remembered (the longest idle is forgotten beyond)."""
        return self._max_idle_programs

    @property
    def dropped_idle_programs(self) -> int:
        """Idle programs forgotten so far to keep at most ``max_idle_programs``."""
        return self._dropped_idle_programs


class _Program:
    __slots__ = ("arrival_s", "attained_s", "idle_since_s", "live", "order", "tool",
                 "tool_since_s", "turns")  # fmt: skip

    def __init__(self, arrival_s: float, order: int) -> None:
        self.arrival_s = arrival_s
        self.order = order  # FCFS position: programs created before it (see the module doc)
        self.idle_since_s = 0.0  # when it last became idle (read while it is idle)
        self.turns = 0  # finished requests
        self.attained_s = 0.0  # seconds its requests have run (pop to finish or preempt)
        self.live: set[str] = set()  # its waiting and running requests
        # An outstanding tool call (or pinned gap): its tool and when it started.
        self.tool: str | None = None
        self.tool_since_s: float | None = None


class _FinishPlan(NamedTuple):
    """A finish checked by ``ProgramScheduler._check_finish``, to commit."""

    request_id: str
    now: float
    blocks: int
    tool: str | None  # its key
    decision: PinDecision | None  # None: a last turn
    full: bool  # the window of blocks_held is full
    held_sum: int  # the window's sum with this finish


class _Request:
    __slots__ = ("arrival_s", "pinned", "preempted", "program_id", "returning", "running",
                 "started_s")  # fmt: skip

    def __init__(self, program_id: str, arrival_s: float, pinned: bool, returning: bool) -> None:
        self.program_id = program_id
        self.arrival_s = arrival_s
        self.pinned = pinned  # consumed its program's pin on arrival
        self.preempted = False
        self.running = False
        self.returning = returning  # came back to a dropped cache; cleared at first pop
        self.started_s = 0.0  # when it last started running (pop)


@synchronized
class ProgramScheduler(IdleCap):
    """Waiting queue and pin table of CacheTTL over a ``TTLPolicy`` (used, never copied:
    the caller sees its estimators move)."""

    def __init__(
        self,
        policy: Any,
        total_blocks: Any,
        pin_budget_blocks: Any,
        max_idle_programs: Any = DEFAULT_MAX_IDLE_PROGRAMS,
        tenant_weights: Any = None,
    ) -> None:
        # A TTLPolicy of this backend, not any object with a `decide`: the native scheduler
        # drives its own policy's core directly, and both backends refuse alike.
        if not isinstance(policy, TTLPolicy):
            raise TypeError(f"policy must be a TTLPolicy, got {type(policy).__name__}")
        self._policy = policy
        self._total_blocks = int_in("total_blocks", total_blocks, 1, MAX_BLOCKS)
        self._pin_budget_blocks = int_in("pin_budget_blocks", pin_budget_blocks, 0,
                                         self._total_blocks)  # fmt: skip
        self._max_idle_programs = int_in("max_idle_programs", max_idle_programs, 0,
                                         MAX_IDLE_PROGRAMS)  # fmt: skip
        self._dropped_idle_programs = 0
        self._idle = FairOrder()  # idle programs, idle longest first (fair_order.py)
        self._queue = WaitingQueue()
        self._pins = PinTable(check_tenant_weights(tenant_weights))  # (tenants.py)
        self._programs: dict[str, _Program] = {}
        self._programs_seen = 0  # programs created so far: the next one's FCFS position
        self._requests: dict[str, _Request] = {}
        self._held: deque[int] = deque()  # blocks_held of the last finished requests
        self._held_sum = 0
        self._now = -math.inf
        self._config = policy.config  # (fixed: read once)
        self._pin_handover = self._config.pin_handover
        self._at_schedule = self._pin_handover == "schedule"
        self._serve_order = self._config.serve_order
        self._by_attained = self._serve_order == "attained"

    # -- checks (no state changes) ----------------------------------------------------------
    def _check_now(self, now: Any) -> float:
        t = finite("now", now) + 0.0  # -0.0 → 0.0: one total order in both backends
        if t < self._now:
            raise ValueError(f"now must be >= {self._now!r} (time never goes back), got {t!r}")
        return t

    def _request(self, request_id: Any) -> _Request:
        rid = check_id("request_id", request_id)
        req = self._requests.get(rid)
        if req is None:
            raise KeyError(f"unknown request_id: {rid!r}")
        return req

    def _running(self, request_id: Any) -> _Request:
        req = self._request(request_id)
        if not req.running:
            raise ValueError(f"request_id {request_id!r} must be running, got a waiting request")
        return req

    # -- arrivals ---------------------------------------------------------------------------
    def arrive(self, request_id: Any, program_id: Any, now: Any, blocks_needed: Any) -> Pin | None:
        """A request enters the waiting queue.  Returns the program's pin if this arrival
        consumed it (its blocks are now this request's prefix), else None."""
        rid = check_id("request_id", request_id)
        pid = check_id("program_id", program_id)
        t = self._check_now(now)
        # Checked (a request larger than the engine can never run), not stored: the engine
        # allocates, the queue only orders.
        int_in("blocks_needed", blocks_needed, 0, self._total_blocks)
        if rid in self._requests:
            raise ValueError(f"request_id {rid!r} must be new, got one already waiting or running")
        consumed = self._arrive(rid, pid, t)
        self._now = t
        return consumed

    def arrive_many(self, request_ids: Any, program_ids: Any, now: Any,
                    blocks_needed: Any) -> list[Pin | None]:  # fmt: skip
        """``arrive`` for many requests at one ``now``, in order (all checked first: one bad
        entry changes nothing).  ``blocks_needed`` may be a numpy integer array."""
        rids = check_ids("request_ids", request_ids)
        pids = check_ids("program_ids", program_ids)
        t = self._check_now(now)
        if isinstance(blocks_needed, (str, bytes)) or not isinstance(blocks_needed, Iterable):
            raise TypeError(f"blocks_needed must be a sequence of int, got "
                            f"{type(blocks_needed).__name__}")  # fmt: skip
        blocks = [int_in("blocks_needed", b, 0, self._total_blocks) for b in blocks_needed]
        if not len(rids) == len(pids) == len(blocks):
            raise ValueError(f"request_ids, program_ids and blocks_needed must be of one length, "
                             f"got {len(rids)}, {len(pids)}, {len(blocks)}")  # fmt: skip
        seen: set[str] = set()
        for rid in rids:
            if rid in self._requests or rid in seen:
                raise ValueError(f"request_ids must be new and distinct, got {rid!r} twice")
            seen.add(rid)
        self._now = t
        return [self._arrive(r, p, t) for r, p in zip(rids, pids, strict=False)]

    def _renews(self, pid: str, t: float) -> bool:
        """Whether ``pid`` arriving at ``t`` queues as a new program: idle longer than any pin
        lasts (module doc).  The lifecycle asks first, so that load control starts it anew too."""
        prog = self._programs.get(pid)
        return (
            prog is not None
            and pid in self._idle
            and t - prog.idle_since_s > self._config.max_ttl_s
        )

    def _restarts_fcfs(self, pid: str, t: float) -> bool:
        """Whether ``pid`` arriving at ``t`` takes a new program's FCFS place: it ``_renews``
        and the queue is in program order (by attained service a returning call's rank does
        not use its program's arrival).  Load control must then start it anew too."""
        return not self._by_attained and self._renews(pid, t)

    def _arrive(self, rid: str, pid: str, t: float) -> Pin | None:
        prog = self._programs.get(pid)
        if prog is not None and prog.tool_since_s is not None:
            # The only call that may fail comes first: nothing is changed if it does.
            self._policy.observe_tool(prog.tool, t - prog.tool_since_s, tenant_of(pid))
            prog.tool, prog.tool_since_s = None, None
        if prog is None:
            prog = self._programs[pid] = _Program(t, self._programs_seen)
            self._programs_seen += 1
        elif self._renews(pid, t):
            # Idle longer than any pin lasts: it queues as a new arrival (see the module doc).
            prog.arrival_s, prog.order = t, self._programs_seen
            self._programs_seen += 1
        self._idle.discard(pid)
        if self._at_schedule:
            consumed = None
            req = _Request(pid, t, self._pins.get(pid) is not None, returning=prog.turns > 0)
        else:
            consumed = self._pins.remove(pid)
            req = _Request(pid, t, consumed is not None,
                           returning=prog.turns > 0 and consumed is None)  # fmt: skip
        self._requests[rid] = req
        prog.live.add(rid)
        self._pins.live(pid, 1)
        self._queue.push(self._key(rid, req, prog))
        return consumed

    # -- the queue --------------------------------------------------------------------------
    def _key(self, rid: str, req: _Request, prog: _Program) -> Key:
        """The request's priority tuple; its rank is read now (see ``serve_order``)."""
        rank = prog.arrival_s
        if self._by_attained and not req.preempted:
            rank = req.arrival_s + prog.attained_s if prog.turns else math.inf
        return (not req.preempted, not req.pinned, rank, prog.order, req.arrival_s, rid)

    def peek(self) -> str | None:
        """The request ``pop`` would return, or None when nothing waits."""
        return self._queue.peek()

    def first_waiting(self, n: Any) -> list[str]:
        """Up to ``n`` waiting requests, in the order ``pop`` would return them if nothing
        changed: what a caller may run out of turn (``take``) when the head cannot run.
        Changes nothing."""
        return self._queue.smallest(int_in("n", n, 0, MAX_BLOCKS))

    def pop(self, now: Any) -> str | None:
        """The waiting request with the smallest priority tuple, now running; None if none."""
        t = self._check_now(now)
        rid = self._queue.peek()
        if rid is not None:
            self._start(rid, t)
        self._now = t
        return rid

    def take(self, request_id: Any, now: Any) -> None:
        """The waiting request runs now, ahead of its turn; every other request keeps its
        place.  For an engine that passes over a head load control refuses (a
        tenant's program behind another tenant's): ``pop`` then ``preempt`` would rank the
        passed-over requests as preempted, ahead of everything."""
        rid = check_id("request_id", request_id)
        req = self._request(rid)
        if req.running:
            raise ValueError(f"request_id {rid!r} must be waiting, got a running request")
        t = self._check_now(now)
        self._start(rid, t)
        self._now = t

    def _start(self, rid: str, t: float) -> None:
        """Waiting request ``rid`` leaves the queue and runs from ``t``."""
        req = self._requests[rid]
        handover = self._at_schedule and self._pins.get(req.program_id) is not None
        if req.returning and not handover:
            self._policy.observe_queueing_delay(t - req.arrival_s)
        req.returning = False
        self._queue.remove(rid)
        req.running = True
        req.started_s = t
        if handover:  # the pin passes to this request: its blocks are its prefix now
            self._pins.remove(req.program_id)
            self._rekey_waiting(req.program_id)

    def pop_many(self, n: Any, now: Any) -> list[str]:
        """Up to ``n`` requests, as ``pop`` would return them one by one."""
        count = int_in("n", n, 0, MAX_BLOCKS)
        t = self._check_now(now)
        out: list[str] = []
        while len(out) < count and (rid := self.pop(t)) is not None:
            out.append(rid)
        self._now = t
        return out

    def preempt(self, request_id: Any, now: Any) -> None:
        """A running request goes back to the queue, ahead of every request not preempted."""
        req = self._running(request_id)
        t = self._check_now(now)
        self._now = t
        prog = self._programs[req.program_id]
        prog.attained_s += t - req.started_s
        req.running = False
        req.preempted = True
        self._queue.push(self._key(request_id, req, prog))

    # -- finishing and pins -----------------------------------------------------------------
    def finish(
        self, request_id: Any, now: Any, blocks_held: Any, turn: Any = None, **fields: Any
    ) -> Finished:
        """A running request ended, holding ``blocks_held`` blocks; ``turn`` (a ``TurnEnd``,
        or its fields as keywords) says with a call to which tool, whether it was the
        program's last turn and what a miss would cost.  Unless it was the last turn, the
        policy decides a TTL and the blocks are pinned until ``now + ttl_s`` when
        ``ttl_s > 0`` and the pin budget has room.  A last turn ends the program (see
        ``end_program``)."""
        end = turn_end(turn, fields)
        return self._finish_checked(self._check_finish(request_id, now, blocks_held, end))

    def _check_finish(
        self, request_id: Any, now: Any, blocks_held: Any, turn: TurnEnd
    ) -> _FinishPlan:
        """Raises what ``finish`` would, changing nothing (``ProgramLifecycle`` asks load
        control too before either part commits); else what ``_finish_checked`` commits."""
        # The types of tool and last_turn first: the native binding must refuse them before
        # it hands anything to the core (no value of theirs is sure to fail there).
        key = tool_key(turn.tool)
        last = check_bool("last_turn", turn.last_turn)
        self._running(request_id)
        t = self._check_now(now)
        blocks = int_in("blocks_held", blocks_held, 0, self._total_blocks)
        cache_miss_cost_s = turn.cache_miss_cost_s
        if cache_miss_cost_s is not None:
            non_negative("cache_miss_cost_s", cache_miss_cost_s)
        int_in("prefix_tokens", turn.prefix_tokens, 0, MAX_BLOCKS)
        int_in("offloaded_tokens", turn.offloaded_tokens, 0, MAX_BLOCKS)
        full = len(self._held) == MEAN_ACTIVE_WINDOW
        held_sum = self._held_sum + blocks - (self._held[0] if full else 0)
        held_n = len(self._held) + (0 if full else 1)
        if turn.mean_active_blocks is None:
            mean_active = max(float(held_sum) / float(held_n), 1.0)
        else:
            mean_active = positive("mean_active_blocks", turn.mean_active_blocks)
        decision = None
        if not last:
            decision = self._policy.decide(
                tool=key,
                request_blocks=blocks,
                mean_active_blocks=mean_active,
                cache_miss_cost_s=cache_miss_cost_s,
                prefix_tokens=turn.prefix_tokens,
                now=t,
                offloaded_tokens=turn.offloaded_tokens,
                tenant=tenant_of(self._requests[request_id].program_id),
            )
        return _FinishPlan(request_id, t, blocks, key, decision, full, held_sum)

    def _finish_checked(self, plan: _FinishPlan) -> Finished:
        """``finish`` with what ``_check_finish`` returned (nothing changed in between)."""
        request_id, t, blocks, key, decision, full, held_sum = plan
        req = self._requests[request_id]
        self._now = t
        if full:
            self._held.popleft()
        self._held.append(blocks)
        self._held_sum = held_sum
        pid = req.program_id
        prog = self._programs[pid]
        prog.turns += 1
        prog.attained_s += t - req.started_s
        prog.live.discard(request_id)
        del self._requests[request_id]
        if decision is None:
            self._pins.live(pid, -1)
            return unchecked(Finished, None, None, self._end(pid, observe=True), ())
        pin = None
        # (its tenant is still active here: the live count drops after the decision)
        room = None
        if decision.ttl_s > 0.0:
            room = self._pins.make_room(pid, blocks, self._pin_budget_blocks)
        released: list[Pin] = []
        if room is not None:
            for other in room:
                gone = self._pins.remove(other)
                assert gone is not None
                released.append(gone)
                if self._at_schedule:
                    self._rekey_waiting(other)
            deadline_s = t + decision.ttl_s
            if not math.isfinite(deadline_s):
                deadline_s = sys.float_info.max  # a TTL near the float limit: still finite
            pin = self._pins.add(pid, blocks, deadline_s, prog.order)
            if self._at_schedule:
                self._rekey_waiting(pid)
        self._pins.live(pid, -1)
        self._note_unpinned(released)
        if key is not None or pin is not None:
            prog.tool, prog.tool_since_s = key, t
        else:
            prog.tool, prog.tool_since_s = None, None
        self._note_idle(pid)
        return unchecked(Finished, decision, pin, None, tuple(released))

    def expire(self, now: Any) -> list[Pin]:
        """Releases and returns the pins whose deadline is ``<= now``, by (deadline, program);
        at schedule (``pin_handover``), those with deadline ``< now`` whose program has no
        request waiting."""
        t = self._check_now(now)
        self._now = t
        if not self._at_schedule:
            return self._note_unpinned(self._pins.expire(t))
        out: list[Pin] = []
        held: list[Pin] = []
        for pin in self._pins.expire_before(t):
            (held if self._has_waiting(pin.program_id) else out).append(pin)
        for pin in held:  # a request of the program waits: the pin stays, unchanged
            self._pins.add(pin.program_id, pin.blocks, pin.deadline_s,
                           self._programs[pin.program_id].order)  # fmt: skip
        return self._note_unpinned(out)

    def reclaim(self, blocks_needed: Any, now: Any, for_program: Any = None) -> list[Pin]:
        """Releases pins until at least ``blocks_needed`` blocks are released or no pin is
        left: the latest pin of the tenant furthest over its share of the pin budget while
        one is, then latest-arrived program first; returns them in release order.

        ``for_program``: the program whose request needs the blocks.  Its own pin and the
        pins of programs that arrived before it are kept (program-level FCFS: an older
        program's cache is not given to a younger one).  None: any pin."""
        need = int_in("blocks_needed", blocks_needed, 0, MAX_BLOCKS)
        keep_until = None
        if for_program is not None:
            pid = check_id("for_program", for_program)
            if pid not in self._programs:
                raise KeyError(f"unknown for_program: {pid!r}")
            keep_until = self._programs[pid].order
        t = self._check_now(now)
        self._now = t
        released = self._pins.reclaim(need, self._pin_budget_blocks, keep_until)
        if self._at_schedule:
            for pin in released:
                self._rekey_waiting(pin.program_id)
        return self._note_unpinned(released)

    def _has_waiting(self, pid: str) -> bool:
        return any(rid in self._queue for rid in self._programs[pid].live)

    def _rekey_waiting(self, pid: str) -> None:
        """Handover at schedule: the program's waiting requests rank as pinned exactly while
        it holds a pin."""
        prog = self._programs[pid]
        pinned = self._pins.get(pid) is not None
        for rid in prog.live:
            req = self._requests[rid]
            if rid in self._queue and req.pinned != pinned:
                req.pinned = pinned
                self._queue.push(self._key(rid, req, prog))

    def _note_unpinned(self, released: list[Pin]) -> list[Pin]:
        for pin in released:
            if pin.program_id in self._programs:
                self._note_idle(pin.program_id)
        return released

    def _note_idle(self, pid: str) -> None:
        """Marks the program idle if it has no live request and no pin, first making room
        under the cap (``fair_order``: what goes is chosen as the program is about to join)."""
        if self._programs[pid].live or self._pins.get(pid) is not None:
            return
        self._programs[pid].idle_since_s = self._now
        if pid not in self._idle:
            while self._idle and len(self._idle) >= self._max_idle_programs:
                gone = self._idle.victim(tenant_of(pid))
                self._idle.discard(gone)
                del self._programs[gone]
                self._dropped_idle_programs += 1
            if not self._max_idle_programs:  # (no room at all: it goes itself)
                del self._programs[pid]
                self._dropped_idle_programs += 1
                return
        self._idle.touch(pid)

    def record_queueing_delay(self, delay_s: Any) -> None:
        """A queueing delay the queue cannot see (``pop`` records its own) for the
        out-of-order cost T."""
        self._policy.observe_queueing_delay(delay_s)

    # -- ending -----------------------------------------------------------------------------
    def end_program(self, program_id: Any) -> Ended:
        """The program is done: release its pin, drop its live requests, observe its turns
        for η and forget it."""
        pid = check_id("program_id", program_id)
        if pid not in self._programs:
            raise KeyError(f"unknown program_id: {pid!r}")
        return self._end(pid, observe=True)

    def abort(self, request_id: Any) -> Ended:
        """The request was aborted (its client went away): its whole program ends, without
        observing η."""
        req = self._request(request_id)
        return self._end(req.program_id, observe=False)

    def _end(self, pid: str, observe: bool) -> Ended:
        prog = self._programs[pid]
        if observe and prog.turns > 0:
            self._policy.observe_program(min(prog.turns, MAX_TURNS))
        del self._programs[pid]
        self._idle.discard(pid)
        pin = self._pins.remove(pid)
        dropped = tuple(sorted(prog.live))
        if dropped:
            self._pins.live(pid, -len(dropped))
        for rid in dropped:
            self._queue.remove(rid)
            del self._requests[rid]
        return unchecked(Ended, pid, prog.turns, pin, dropped)

    # -- read-only views --------------------------------------------------------------------
    @property
    def policy(self) -> TTLPolicy:
        """The ``TTLPolicy`` it decides with (used, never copied)."""
        return self._policy

    @property
    def pin_handover(self) -> str:
        """When a pin passes to the program's next request: `"arrival"` or `"schedule"`."""
        return self._pin_handover

    @property
    def serve_order(self) -> str:
        """The order of returning calls: `"program"` or `"attained"`."""
        return self._serve_order

    @property
    def total_blocks(self) -> int:
        """The engine's KV blocks."""
        return self._total_blocks

    @property
    def pin_budget_blocks(self) -> int:
        """The most KV blocks all pins may hold together."""
        return self._pin_budget_blocks

    @property
    def pinned_blocks(self) -> int:
        """KV blocks held by pins."""
        return self._pins.blocks

    @property
    def pin_count(self) -> int:
        """Pins held."""
        return len(self._pins)

    @property
    def waiting_count(self) -> int:
        """Requests waiting."""
        return len(self._queue)

    @property
    def running_count(self) -> int:
        """Requests running."""
        return len(self._requests) - len(self._queue)

    @property
    def program_count(self) -> int:
        """Programs known (live, pinned or idle)."""
        return len(self._programs)

    @property
    def next_deadline_s(self) -> float | None:
        """The earliest pin deadline, None without pins.  At schedule (``pin_handover``): of
        the pins ``expire`` may release, those whose program has no request waiting."""
        if not self._at_schedule:
            return self._pins.next_deadline_s()
        free = [p.deadline_s for p in self._pins.all() if not self._has_waiting(p.program_id)]
        return min(free) if free else None

    @property
    def mean_active_blocks(self) -> float | None:
        """The tracked M̄ (see the module doc); None before any request finished."""
        if not self._held:
            return None
        return max(float(self._held_sum) / float(len(self._held)), 1.0)

    def pins(self) -> list[Pin]:
        """Every pin, by (deadline, program id)."""
        return self._pins.all()

    def pin(self, program_id: Any) -> Pin | None:
        """The program's pin, None when it holds none (or is unknown)."""
        return self._pins.get(check_id("program_id", program_id))

    def state(self, request_id: Any) -> str:
        """``"waiting"`` or ``"running"``."""
        return "running" if self._request(request_id).running else "waiting"

    def priority(self, request_id: Any) -> Key:
        """The priority tuple of a waiting request (smaller runs first): (not preempted, not
        pinned, rank_s, program order, arrival_s, request id), ``rank_s`` the program's
        arrival or, with ``serve_order="attained"``, see the module doc; engines that sort
        their own queue (SGLang) use it as the sort key."""
        req = self._request(request_id)
        if req.running:
            raise ValueError(f"request_id {request_id!r} must be waiting, got a running request")
        return self._queue.key(request_id)
