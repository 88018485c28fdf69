"""vLLM's waiting queue, ordered by ``ttlpolicy.ProgramScheduler``.

vLLM's scheduler reads its waiting queue through the ``RequestQueue`` interface (peek the
head, pop it when admitted, prepend it back when preempted or skipped).  This implementation
keeps no order of its own: every operation is forwarded to the ``ProgramScheduler`` (through
the ``ProgramLifecycle`` that joins it to load control), which orders by ``(not preempted,
not pinned, program arrival, request arrival, request id)``; this class only maps request ids
back to vLLM ``Request`` objects.  Requests are tracked under
``scheduler_key(request_id)`` (the id itself unless it is too long for the ProgramScheduler).

With load control (``ttlpolicy.AdmissionControl``, on by default) the queue is *gated*:
vLLM's scheduling scan runs ``while`` the queue is truthy, so the queue is falsy when the
program of its head is refused by the working-set rule (``ProgramLifecycle.may_run``) and no
request behind it may run either: the refused requests stay queued in their order and
``len()`` still counts them (vLLM keeps stepping).  Working-set shares are per tenant, so
behind a refused head the queue asks about the requests ``ttlpolicy.serving.tenant_probe``
names — other tenants' first programs (at most one refusal per tenant and
``MAX_OTHER_TENANTS`` other tenants per step; ``new_step`` starts a step) — and the first that
may run goes next, out of turn (``ProgramScheduler.take``: the rest keep their places).
With one tenant a refused head holds back every newer program (program FCFS), as without
tenants.  An anonymous request (no program id: a one-request program) is never held back by
load control: at the head it is admitted whatever the working set
(``AdmissionControl.admit``), as stock vLLM serves it.

Past a head whose whole prompt does not fit the free blocks now (vLLM's scan stops at it:
``allocate_slots`` fails) while load control lets it run, the first of the next
``skip_depth`` waiting requests in the library's order that fits and may run goes next, out
of turn (``ttlpolicy.serving.skip_ahead``, through ``ProgramScheduler.take``); ``fits`` says
what fits (``TTLScheduler``: the free blocks and the request's own held chain).
``head_request`` is the head without that skip: pins give way for the library's head.

A request the library cannot track (its program tables are full: ``AdmissionControl``
tracks at most ``MAX_PROGRAMS`` live programs, and ``arrive`` refuses a new one beyond them)
is served as stock would, not failed: it waits *untracked*, first in first out, and is
scheduled whenever the tracked head may not run (no tracked request waits, or load control
refuses it); it is never pinned and tells the library nothing when it ends.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ttlpolicy.ids import tenant_of
from ttlpolicy.serving.skip_ahead import HeadSkips
from ttlpolicy.serving.tenant_probe import TenantQueue, ask_in_turn

from .compat import Request, RequestQueue
from .identity import scheduler_key

logger = logging.getLogger("vllm.ttlpolicy_vllm")


class ProgramRequestQueue(RequestQueue):
    def __init__(
        self,
        life: Any,
        clock: Callable[[], float],
        program_id_of: Callable[[Request], str],
        blocks_needed: Callable[[Request], int],
        anonymous: Callable[[Request], bool] = lambda request: False,
        fits: Callable[[Request], bool] | None = None,
        skip_depth: int = 0,
    ) -> None:
        self._life = life  # a ttlpolicy.ProgramLifecycle
        self._programs = life.scheduler
        self._clock = clock
        self._program_id_of = program_id_of
        self._blocks_needed = blocks_needed
        self._anonymous = anonymous
        self._fits = fits
        self._head_skips = HeadSkips(skip_depth if fits is not None else 0)
        self._requests: dict[str, Request] = {}  # queued, by id
        self._by_tenant: TenantQueue[str] = TenantQueue()  # the same keys, by tenant
        self._popped: set[str] = set()  # popped and not finished: a re-queue is a preemption
        self._removed: set[str] = set()  # removed by vLLM, not yet settled
        # not tracked by the library (its tables full): waiting in arrival order, and popped
        self._untracked: OrderedDict[str, Request] = OrderedDict()
        self._untracked_popped: set[str] = set()
        # this step (``new_step``): the waiting order when the head was refused, the request
        # load control let go ahead of it, and the programs and tenants it refused
        self._order: list[str] | None = None
        self._detour: str | None = None
        self._refused_programs: set[str] = set()
        self._refused_tenants: set[str] = set()
        # the head too large for memory and the request run past it (None: none fits),
        # asked once per admission; ``head_request`` asks with no skip
        self._skip: tuple[str, str | None] | None = None
        self._no_skip = False
        #: requests run past a head too large for memory (``ttlpolicy_queue_skips``)
        self.skips = 0

    # -- vLLM's RequestQueue interface ----------------------------------------------------
    def add_request(self, request: Request) -> None:
        key = scheduler_key(request.request_id)
        if key in self._popped:
            self._requeue(key, request)
            return
        if key in self._untracked_popped:  # preempted or skipped: back, first
            self._untracked_popped.discard(key)
            self._untracked[key] = request
            self._untracked.move_to_end(key, last=False)
            return
        # (a pin it consumes stays held for it until it is admitted: the lifecycle's hold)
        program_id = self._program_id_of(request)
        try:
            self._life.arrive(key, program_id, self._clock(), self._blocks_needed(request))
        except ValueError as e:  # the library's tables are full: served untracked (module doc)
            logger.warning("ttlpolicy: request %s served untracked: %s", key, e)
            self._untracked[key] = request
            return
        self._waits(key, request, program_id)

    def _tracked_first(self) -> bool:
        """Whether a tracked request goes next (else the oldest untracked request does)."""
        if not self._untracked:
            return True
        return bool(self._requests) and self._next_tracked() is not None

    def pop_request(self) -> Request:
        if not self._tracked_first():
            key, request = self._untracked.popitem(last=False)
            self._untracked_popped.add(key)
            return request
        rid = self._passing()
        if rid is None:
            rid = self._skipping()
            if rid is not None:
                self._head_skips.taken()
                self.skips += 1
        if rid is None:
            rid = self._programs.pop(self._clock())
        else:  # past a head load control refused, or too large for memory (module doc)
            self._programs.take(rid, self._clock())
            self._detour = None
        self._skip = None  # (memory changes with each admission: asked again)
        if rid is None:
            raise IndexError("pop from an empty queue")
        self._popped.add(rid)
        self._by_tenant.discard(rid)
        return self._requests.pop(rid)

    def peek_request(self) -> Request:
        if not self._tracked_first():
            return next(iter(self._untracked.values()))
        rid = self._passing() or self._skipping() or self._programs.peek()
        if rid is None:
            raise IndexError("peek from an empty queue")
        return self._requests[rid]

    def head_request(self) -> Request:
        """What ``peek_request`` returns, with no skip past a head too large for memory: the
        request pins give way for (module doc)."""
        self._no_skip = True
        try:
            return self.peek_request()
        finally:
            self._no_skip = False

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        self.remove_requests((request,))

    def remove_requests(self, requests: Iterable[Request]) -> None:
        # vLLM removes a waiting request only to finish it (abort, or a preempted request
        # that stopped); TTLScheduler._free_request then settles it with the ProgramScheduler,
        # which still counts it as waiting until then.
        for request in requests:
            key = scheduler_key(request.request_id)
            if self._requests.pop(key, None) is not None:
                self._removed.add(key)
            self._by_tenant.discard(key)
            self._untracked.pop(key, None)

    def __bool__(self) -> bool:
        # vLLM's scan reads this before each peek: the gate of the module doc.
        if self._untracked:
            return True
        return bool(self._requests) and self._next_tracked() is not None

    def new_step(self) -> None:
        """A scheduling step begins: what was refused in the last one may be asked again."""
        self._order = None
        self._detour = None
        self._skip = None
        self._refused_programs.clear()
        self._refused_tenants.clear()

    def _next_tracked(self) -> str | None:
        """The tracked request that goes next: the head, or when load control refuses it, the
        next one ``tenant_probe.next_to_ask`` names that it lets run; None: none this step."""
        head = self._programs.peek()
        if head is None or self._may_run(head):
            self._detour = None
            return head if head is None else self._past_large(head)
        if self._passing() is not None:
            return self._detour
        self._detour = None
        self._refuse(head)
        if self._order is None:  # what the probe reads this step (``TenantQueue``)
            self._order = self._by_tenant.candidates(self._refused_tenants, self._programs.priority)
        waiting = [key for key in self._order if key in self._requests]
        allowed = ask_in_turn(waiting, self._program_of_key, self._may_run,
                              self._refused_programs, self._refused_tenants,
                              self._by_tenant.refused)  # fmt: skip
        self._detour = next(allowed, None)
        return self._detour

    def _passing(self) -> str | None:
        """The request the gate (``__bool__``, the last to ask load control) let pass a refused
        head, if still waiting: peek and pop take it without asking again, as they take the
        head the gate let run (asking twice could change load control's answer)."""
        return self._detour if self._detour in self._requests else None

    def _past_large(self, head: str) -> str:
        """``head``, or when its whole prompt does not fit now, the request ``skip_past``
        names after it (module doc); asked once per admission (``_skip``)."""
        if self._no_skip or not self._head_skips.depth:
            return head
        skip = self._skip
        if (
            skip is None
            or skip[0] != head
            or (skip[1] is not None and skip[1] not in self._requests)
        ):
            chosen = None
            if head in self._requests and not self._request_fits(head):
                chosen = self._head_skips.choose(
                    self._programs, head, self._request_fits, self._may_run
                )
            skip = self._skip = (head, chosen)
        return skip[1] or head

    def _skipping(self) -> str | None:
        """The request ``_past_large`` runs past the head, if the head is still the head."""
        skip = self._skip
        if self._no_skip or skip is None or skip[1] not in self._requests:
            return None
        return skip[1] if skip[0] == self._programs.peek() else None

    def _request_fits(self, key: str) -> bool:
        """Whether queued request ``key``'s prompt fits now (False: not queued here)."""
        request = self._requests.get(key)
        return request is not None and (self._fits is None or self._fits(request))

    def _program_of_key(self, key: str) -> str:
        return str(self._program_id_of(self._requests[key]))

    def _refuse(self, key: str) -> None:
        if key in self._requests:
            program_id = self._program_of_key(key)
            self._refused_programs.add(program_id)
            self._refused_tenants.add(tenant_of(program_id))

    def _may_run(self, rid: str) -> bool:
        """May tracked request ``rid`` be scheduled now (load control; an anonymous one
        always)?"""
        request = self._requests.get(rid)
        if request is None:  # the head was removed by vLLM and is being settled
            return True
        program_id, now = self._program_id_of(request), self._clock()
        admission = self._life.admission
        if admission is not None and self._anonymous(request):
            admission.admit(program_id, now)  # never held back (module doc)
            return True
        return bool(self._life.may_run(program_id, now))

    def __len__(self) -> int:
        return len(self._requests) + len(self._untracked)

    def __iter__(self) -> Iterator[Request]:
        # Arrival order; vLLM's scheduler never iterates its waiting queue.
        return iter([*self._requests.values(), *self._untracked.values()])

    # -- adapter side ---------------------------------------------------------------------
    def _requeue(self, key: str, request: Request) -> None:
        # Preempted (or popped then skipped by vLLM's scan): back into the queue, first.
        self._programs.preempt(key, self._clock())
        self._popped.discard(key)
        self._waits(key, request, self._program_id_of(request))

    def _waits(self, key: str, request: Request, program_id: str) -> None:
        self._requests[key] = request
        self._by_tenant.add(key, tenant_of(program_id))

    def forget(self, request_id: str) -> None:
        """The request finished: it will not come back."""
        key = scheduler_key(request_id)
        self._popped.discard(key)
        self._removed.discard(key)
        self._requests.pop(key, None)
        self._by_tenant.discard(key)
        self._untracked.pop(key, None)
        self._untracked_popped.discard(key)

    def readmit(self, keys: Iterable[str]) -> None:
        """Requests the ProgramScheduler dropped with their program (an abort of a sibling)
        that vLLM still holds: waiting ones arrive again, as a new program; running ones
        are no longer tracked there (their finish is then skipped)."""
        for key in keys:
            request = self._requests.pop(key, None)
            self._by_tenant.discard(key)
            if request is not None:
                self.add_request(request)
            self._popped.discard(key)

    def state(self, request_id: str) -> str | None:
        """``"waiting"``/``"running"`` as the ProgramScheduler tracks it, None if untracked."""
        key = scheduler_key(request_id)
        if key in self._requests or key in self._removed:
            return "waiting"
        return "running" if key in self._popped else None
