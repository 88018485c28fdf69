"""A program's life on one engine: one object that engines report to and that says what they
must free or hold.

An engine that serves agent programs with ttlpolicy keeps three pieces of the library's state
— the waiting queue and pin table (``ProgramScheduler``), load control and the eviction order
(``AdmissionControl``, optional) — and one of its own: the blocks of a pin *handed over* to
its program's next request at arrival, which the engine keeps holding until that request is
admitted (else they could be evicted in between).  ``ProgramLifecycle`` owns the rules that
join them, so that no engine states them again:

* ``arrive`` reports a request to both; a pin it consumed becomes a *held chain* of that
  request (kept by arrival order).
* ``admitted`` ends the hold: the request's own references hold its prefix now.
* ``finish`` reports a finished request to both, once; ``abort`` and ``end_program`` end the
  program in both (a last turn ends it in both already).  Holds of the requests they drop
  go with them.
* ``give_way`` — when pins give way.  The engine measures how many blocks its next step
  (its running requests' growth plus the queue's head) is short of, and calls it before
  scheduling: pins are reclaimed first (``ProgramScheduler.reclaim``: latest-arrived
  program first, or only younger programs' with ``for_program``); then, only when the engine
  is *stalled* — no running request will end to free memory (nothing runs, or an allocation
  would otherwise fail) — the held chains of the other waiting requests yield too, the
  latest to arrive first, until the head fits.  The engine carries each release out through
  ``release(program_id, request_id)`` and answers how many blocks it made available
  (request_id None: a pin; else that request's held chain): blocks shared with other
  requests free nothing, so only the engine can tell.

Errors: every call is all-or-nothing.  What the scheduler or load control would refuse is
refused before either changes — the scheduler's checks first, then load control's (its clock
may be ahead of the scheduler's: ``may_run`` moves it; its ``total_blocks`` may be smaller;
``arrive``: the ids, then load control's, then the scheduler's) — with their error, so a
refused call can be retried.  ``give_way`` checks every argument
before anything changes; a ``release`` that raises (or answers a bad count) cannot be undone,
so its contract is what remains: every pin ``reclaim`` took has left the pin table and is
passed to ``release`` once, in reclaim order, even after one raised; if one did, no held
chain yields and the first error is raised after the last release.  Held chains yield one at
a time, each leaving the table just before its ``release``: the first error stops there and
is raised, the chains not reached still held.

The engine contract (what an engine calls, and when) is declared as an abstract class,
``ttlpolicy.contract.LifecycleInterface``.  The engine keeps translating: its requests to
ids, its blocks to counts, references to holds.  ``scheduler`` and ``admission`` stay
readable for what is the engine's own to ask (the queue's order, ``may_run``, the eviction
order).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._validate import check_id, finite, int_in
from ._sync import lock_of, synchronized
from .admission import AdmissionControl
from .policy import MAX_BLOCKS
from .scheduler import Ended, Finished, Pin, ProgramScheduler, turn_end

__all__ = ["ProgramLifecycle"]

#: ``release(program_id, request_id)``: carries out one release, returns the blocks it made
#: available, an int in [0, MAX_BLOCKS] (request_id None: the program's pin; else that
#: request's held chain).  It must not call back into the lifecycle or its parts: the native
#: backend holds them borrowed for the call (``RuntimeError``).
Release = Callable[[str, "str | None"], int]


@synchronized
class ProgramLifecycle:
    """Joins a ``ProgramScheduler`` and an optional ``AdmissionControl`` of the same policy
    (see the module doc)."""

    def __init__(self, scheduler: Any, admission: Any = None) -> None:
        if not isinstance(scheduler, ProgramScheduler):
            raise TypeError(f"scheduler must be a ProgramScheduler, got {type(scheduler).__name__}")
        if admission is not None:
            if not isinstance(admission, AdmissionControl):
                raise TypeError(
                    f"admission must be an AdmissionControl or None, got {type(admission).__name__}"
                )
            if admission.policy is not scheduler.policy:
                raise ValueError(
                    "admission must read the scheduler's policy, got an AdmissionControl of "
                    "another TTLPolicy"
                )
        self._scheduler = scheduler
        self._admission = admission
        self._admission_on = scheduler.policy.config.admission  # (a fixed config: read once)
        self._program_of: dict[str, str] = {}  # live requests (arrived, not finished)
        self._held: OrderedDict[str, str] = OrderedDict()  # request -> program, by arrival

    # -- events ---------------------------------------------------------------------------
    def arrive(self, request_id: Any, program_id: Any, now: Any, blocks_needed: Any) -> Pin | None:
        """A request arrives (both are told).  Returns the pin it consumed, whose blocks the
        engine now holds for it until ``admitted``."""
        check_id("request_id", request_id)  # the ids first, as the native binding converts
        check_id("program_id", program_id)
        admission = self._admission
        with self._parts_locked():
            if admission is None:
                pin = self._scheduler.arrive(request_id, program_id, now, blocks_needed)
            else:  # load control's refusal must come before the scheduler's change
                checked = admission._check_arrive(program_id, now, blocks_needed)
                # a program the scheduler queues as new (idle past max_ttl_s, program order)
                # is new to load control too: one FCFS place in both, or an admitted program
                # could wait behind a head load control refuses, and nothing would run
                renews = self._scheduler._restarts_fcfs(checked[0], checked[1])
                pin = self._scheduler.arrive(request_id, program_id, now, blocks_needed)
                if renews:
                    with contextlib.suppress(KeyError):  # (load control may have dropped it)
                        admission.end(program_id)
                admission._arrive_checked(*checked)
        self._program_of[request_id] = program_id
        if pin is not None:
            self._held[request_id] = pin.program_id
        return pin

    def admitted(self, request_id: Any) -> str | None:
        """The request entered the running batch: its held chain, if any, is its own now.
        Returns the program whose hold the engine drops (None: it held none)."""
        rid = check_id("request_id", request_id)
        return self._held.pop(rid, None)

    def finish(
        self, request_id: Any, now: Any, blocks_held: Any, turn: Any = None, **fields: Any
    ) -> Finished:
        """A running request ended (``ProgramScheduler.finish``, the same ``turn`` or its
        fields as keywords; load control is told the same, with ``cache_miss_cost_s`` as what
        rebuilding the context costs).  What either would refuse is refused before either
        changes: the scheduler's checks first."""
        end = turn_end(turn, fields)
        scheduler, admission = self._scheduler, self._admission
        pid = self._program_of.get(request_id) if isinstance(request_id, str) else None
        rebuild_s = 0.0 if end.cache_miss_cost_s is None else end.cache_miss_cost_s
        tool, last_turn = end.tool, end.last_turn
        with self._parts_locked():
            plan = scheduler._check_finish(request_id, now, blocks_held, end)
            tell = admission is not None and pid is not None
            if tell:
                admission._check_finish(pid, now, blocks_held, tool, rebuild_s, last_turn)
            finished = scheduler._finish_checked(plan)
            if tell:  # (checked above: it cannot refuse now)
                admission.finish(pid, now, blocks_held, tool, rebuild_s, last_turn)
        self._program_of.pop(request_id, None)
        self._held.pop(request_id, None)
        if finished.ended is not None:
            self._forget(finished.ended)
        return finished

    def abort(self, request_id: Any) -> Ended:
        """The request was aborted: its whole program ends in both (no η sample)."""
        with self._parts_locked():
            ended = self._scheduler.abort(request_id)
            self._end_admission(ended.program_id)
        self._program_of.pop(request_id, None)
        self._held.pop(request_id, None)
        return self._forget(ended)

    def end_program(self, program_id: Any) -> Ended:
        """The program is done (η observed): it ends in both."""
        with self._parts_locked():
            ended = self._scheduler.end_program(program_id)
            self._end_admission(ended.program_id)
        return self._forget(ended)

    def may_run(self, program_id: Any, now: Any) -> bool:
        """May a request of the program be scheduled now: load control's answer
        (``AdmissionControl.may_run``) when it is on (``PolicyConfig.admission``), else True."""
        check_id("program_id", program_id)  # refused alike with load control off
        finite("now", now)
        admission = self._admission
        if admission is None or not self._admission_on:
            return True
        return bool(admission.may_run(program_id, now))

    def expire(self, now: Any) -> list[Pin]:
        """Pins past their deadline, released (``ProgramScheduler.expire``)."""
        return self._scheduler.expire(now)

    def give_way(
        self,
        now: Any,
        short_blocks: Any,
        release: Release,
        stalled: Any = False,
        keep: Any = None,
        for_program: Any = None,
    ) -> int:
        """Pins, then held chains, give way to ``short_blocks`` the engine's next step lacks
        (see the module doc); returns the blocks still lacking (``<= 0``: covered).
        ``keep``: the request whose held chain stays (the head's own prefix);
        ``for_program``: reclaim only younger programs' pins (program-level FCFS).  A
        ``release`` that raises does not stop the other reclaimed pins' releases: the first
        error is raised after them (module doc, "Errors")."""
        # Every argument is checked whatever the state (a bad one is refused even when
        # nothing is short): types first, then the values the native core checks.
        if not callable(release):
            raise TypeError(f"release must be callable, got {type(release).__name__}")
        if not isinstance(stalled, bool):
            raise TypeError(f"stalled must be a bool, got {type(stalled).__name__}")
        kept = None if keep is None else check_id("keep", keep)
        if for_program is not None:
            check_id("for_program", for_program)
        finite("now", now)
        short = int_in("short_blocks", short_blocks, -MAX_BLOCKS, MAX_BLOCKS)
        if short <= 0:
            return short
        if self._scheduler.pin_count:
            # Each reclaimed pin has left the scheduler: each goes to `release`, even after
            # one raised (else its blocks stayed held with nothing pinning them); the first
            # error is raised after, and no held chain yields then.
            error: BaseException | None = None
            for pin in self._scheduler.reclaim(short, now, for_program):
                try:
                    short -= self._released(release, pin.program_id, None)
                except BaseException as e:  # (raised after the other releases)
                    error = e if error is None else error
            if error is not None:
                raise error
        if not stalled:
            return short
        for rid in reversed(list(self._held)):
            if short <= 0:
                break
            if rid != kept:
                short -= self._released(release, self._held.pop(rid), rid)
        return short

    # -- views ----------------------------------------------------------------------------
    @property
    def scheduler(self) -> ProgramScheduler:
        """Its ``ProgramScheduler``."""
        return self._scheduler

    @property
    def admission(self) -> AdmissionControl | None:
        """Its load control (``AdmissionControl``), None without one."""
        return self._admission

    def held(self, request_id: Any) -> str | None:
        """The program whose handed-over chain is held for the request (None: none)."""
        return self._held.get(check_id("request_id", request_id))

    @property
    def held_request_ids(self) -> list[str]:
        """Requests holding a handed-over chain, by arrival."""
        return list(self._held)

    @property
    def held_count(self) -> int:
        """Requests holding a handed-over chain."""
        return len(self._held)

    def may_give_way(self, nothing_runs: Any) -> bool:
        """Could ``give_way`` release anything: a pin is held, or a held chain is and
        nothing runs (an engine skips measuring its step otherwise)."""
        if not isinstance(nothing_runs, bool):
            raise TypeError(f"nothing_runs must be a bool, got {type(nothing_runs).__name__}")
        return bool(self._scheduler.pin_count) or (nothing_runs and bool(self._held))

    # -- internals ------------------------------------------------------------------------
    def _parts_locked(self) -> contextlib.ExitStack:
        """Holds load control's lock, then the scheduler's (the order every call takes them
        in), so that nothing changes either between a call's checks and its changes."""
        stack = contextlib.ExitStack()
        parts: list[Any] = [self._admission, self._scheduler]  # (each is synchronized)
        for part in parts:
            if part is not None:
                stack.enter_context(lock_of(part))
        return stack

    @staticmethod
    def _released(release: Release, program_id: str, request_id: str | None) -> int:
        freed = release(program_id, request_id)
        if isinstance(freed, bool) or not isinstance(freed, int):
            raise TypeError(f"release must return an int of blocks, got {type(freed).__name__}")
        return int_in("blocks released", freed, 0, MAX_BLOCKS)

    def _end_admission(self, program_id: str) -> None:
        # (a program load control never saw, or forgot while idle past its cap, has nothing
        # to end there)
        if self._admission is not None and self._admission.knows(program_id):
            self._admission.end(program_id)

    def _forget(self, ended: Ended) -> Ended:
        for rid in ended.request_ids:
            self._program_of.pop(rid, None)
            self._held.pop(rid, None)
        return ended
