"""The engine contract of ``ProgramLifecycle``, declared: what an engine calls, and when.

Like vLLM's v1 ``SchedulerInterface``: an abstract class whose members are the whole surface
an engine adapter may use.  Both backends' ``ProgramLifecycle`` are registered as its
implementations; ``tests/core/test_contract.py`` holds each to it (every member, the same
signature) and holds the engines that drive one — the vLLM and SGLang adapters, the
simulator's ``ttlpolicy`` policies — to calling nothing else.  The rules behind each call are
the reference's (``ttlpolicy/reference/lifecycle.py``, its module doc).

An engine's events, in order, for one request:

1. it reaches the engine's queue: ``arrive`` (a pin consumed: its blocks are held for it);
2. before each scheduling step: ``expire``; when the step is short of blocks and
   ``may_give_way`` says something could yield, ``give_way``; for the head of the queue,
   ``may_run`` (load control);
3. it enters the running batch: ``admitted`` (the hold ends);
4. it ends: ``finish`` (a pin may be made); or it is cut short: ``abort``; or its program is
   done: ``end_program``.  Whatever is released (``Finished.released``, ``Ended.pin``) the
   engine frees.

``held`` and ``held_request_ids`` say which handed-over chains are held; ``scheduler`` and
``admission`` stay readable for what is the engine's own to ask (the queue's order, the
eviction order).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reference.lifecycle import Release
    from .reference.scheduler import Ended, Finished, Pin

__all__ = ["LifecycleInterface"]


class LifecycleInterface(abc.ABC):
    """What an engine may call on a ``ProgramLifecycle`` (see the module doc); every method
    is the reference's, with its arguments' names and defaults."""

    # -- the parts it joins ------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def scheduler(self) -> Any:
        """The ``ProgramScheduler``: the queue's order is the engine's to read."""

    @property
    @abc.abstractmethod
    def admission(self) -> Any:
        """The ``AdmissionControl`` (None: no load control): the eviction order."""

    # -- events -------------------------------------------------------------------------------
    @abc.abstractmethod
    def arrive(self, request_id: Any, program_id: Any, now: Any, blocks_needed: Any) -> Pin | None:
        """A request reached the engine's queue; returns the pin it consumed (held for it
        until ``admitted``)."""

    @abc.abstractmethod
    def admitted(self, request_id: Any) -> str | None:
        """The request entered the running batch; returns the program whose hold ends."""

    @abc.abstractmethod
    def finish(
        self, request_id: Any, now: Any, blocks_held: Any, turn: Any = None, **fields: Any
    ) -> Finished:
        """A running request ended (``turn``: a ``TurnEnd``, or its fields as keywords)."""

    @abc.abstractmethod
    def abort(self, request_id: Any) -> Ended:
        """The request was cut short: its program ends."""

    @abc.abstractmethod
    def end_program(self, program_id: Any) -> Ended:
        """The program is done."""

    @abc.abstractmethod
    def may_run(self, program_id: Any, now: Any) -> bool:
        """Before scheduling the queue's head: may a request of this program run now."""

    @abc.abstractmethod
    def expire(self, now: Any) -> list[Pin]:
        """Before each step: pins past their deadline, released (the engine frees them)."""

    @abc.abstractmethod
    def give_way(
        self,
        now: Any,
        short_blocks: Any,
        release: Release,
        stalled: Any = False,
        keep: Any = None,
        for_program: Any = None,
    ) -> int:
        """Before a step short of ``short_blocks``: pins, then held chains, yield (each
        through ``release``); returns the blocks still lacking."""

    # -- views --------------------------------------------------------------------------------
    @abc.abstractmethod
    def held(self, request_id: Any) -> str | None:
        """The program whose handed-over chain is held for the request."""

    @property
    @abc.abstractmethod
    def held_request_ids(self) -> list[str]:
        """Requests holding a handed-over chain, by arrival."""

    @property
    @abc.abstractmethod
    def held_count(self) -> int:
        """Requests holding a handed-over chain."""

    @abc.abstractmethod
    def may_give_way(self, nothing_runs: Any) -> bool:
        """Could ``give_way`` release anything (else the engine skips measuring its step)."""


def members() -> frozenset[str]:
    """The contract's members: what an engine may use."""
    return frozenset(LifecycleInterface.__abstractmethods__)


def _register() -> None:
    """Both backends' ``ProgramLifecycle`` implement the contract (the native one wherever
    the module is built, whichever backend serves ``import ttlpolicy``)."""
    from .reference.lifecycle import ProgramLifecycle

    LifecycleInterface.register(ProgramLifecycle)
    try:
        from . import _native
    except ImportError:  # not built: the reference alone
        return
    LifecycleInterface.register(_native.ProgramLifecycle)


_register()
