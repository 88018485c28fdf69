"""Which waiting request an engine's queue asks load control about when its head is refused.

Load control shares the working set among the active tenants (``AdmissionControl``): one
tenant's program may start while another tenant's is refused.  An engine queue that stopped at
its first refused request would still hold every tenant behind one tenant's refused program, so
when the head is refused the queue asks ``may_run`` of the next request in its order that
``next_to_ask`` names, lets it go ahead if it may run (``ProgramScheduler.take``: the requests
passed over keep their places), and asks again:

* a request of a program already refused this step is passed over;
* a request of a tenant refused this step is passed over (program FCFS within a tenant: load
  control would refuse it too);
* otherwise the request is its tenant's first not yet refused: asked, as long as at most
  ``MAX_OTHER_TENANTS`` tenants besides the head's were refused this step.

Which waiting requests are read (``TenantQueue``, kept beside the engine's queue): each
tenant's first ``PER_TENANT`` in the queue's order, at most ``MAX_SCANNED`` in all, the tenants
taken by their first waiting request's arrival — except that a tenant refused goes behind
every other.  So one tenant queuing thousands of requests hides nobody else's, and however
many tenants over their share wait ahead of a tenant (each step refuses at most
``MAX_OTHER_TENANTS`` of them), it is asked within a few steps.  With one tenant nothing passes
a refused head: the queue behaves as without tenants.  The tenant of a request is its
program's (``ids.tenant_of``: "" for a program without a tenant, an anonymous request's among
them).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Iterable, Iterator
from itertools import islice
from typing import Any, Generic, TypeVar

from ..ids import tenant_of

__all__ = [
    "MAX_OTHER_TENANTS",
    "MAX_SCANNED",
    "PER_TENANT",
    "TenantQueue",
    "ask_in_turn",
    "next_to_ask",
]

#: Tenants, besides the refused head's, whose first waiting program one step may ask about.
MAX_OTHER_TENANTS = 3
#: Waiting requests one call reads (the rest of the queue is not looked at).
MAX_SCANNED = 256
#: Waiting requests of one tenant read (its first in the queue's order).
PER_TENANT = 8

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class TenantQueue(Generic[K]):
    """The waiting requests' keys by tenant, for the probe (module doc): each tenant's in the
    order they joined, the tenants by their first waiting request's, a refused tenant moved
    behind every other.  An engine's queue tells it what joins and leaves (``add``,
    ``discard``), or lists its whole queue each pass (``sync``)."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, dict[K, None]] = {}
        self._tenant_of: dict[K, str] = {}

    def __len__(self) -> int:
        return len(self._tenant_of)

    def add(self, key: K, tenant: str) -> None:
        """``key`` of ``tenant`` waits (again: it joins at its tenant's end)."""
        self.discard(key)
        self._tenant_of[key] = tenant
        self._by_tenant.setdefault(tenant, {})[key] = None

    def discard(self, key: K) -> None:
        """``key`` no longer waits (nothing if it did not)."""
        tenant = self._tenant_of.pop(key, None)
        if tenant is None:
            return
        keys = self._by_tenant[tenant]
        del keys[key]
        if not keys:
            del self._by_tenant[tenant]

    def sync(self, waiting: Iterable[tuple[K, str]]) -> None:
        """The waiting requests are exactly ``waiting`` (key, tenant), in the queue's order:
        for an engine that lists its queue each pass."""
        listed = dict(waiting)
        for key in [k for k in self._tenant_of if listed.get(k) != self._tenant_of[k]]:
            self.discard(key)
        for key, tenant in listed.items():
            if key not in self._tenant_of:
                self.add(key, tenant)

    def refused(self, tenant: str) -> None:
        """Load control refused ``tenant``: it goes behind every other tenant."""
        keys = self._by_tenant.pop(tenant, None)
        if keys is not None:
            self._by_tenant[tenant] = keys

    def candidates(
        self, skip_tenants: Container[str], priority: Callable[[K], Any] | None = None
    ) -> list[K]:
        """What the probe reads (module doc): the tenants not in ``skip_tenants`` in their
        order, each one's first ``PER_TENANT`` keys (in ``priority`` order if given), at most
        ``MAX_SCANNED`` in all."""
        out: list[K] = []
        for tenant, keys in self._by_tenant.items():
            if len(out) >= MAX_SCANNED:
                break
            if tenant in skip_tenants:
                continue
            first = list(islice(keys, min(PER_TENANT, MAX_SCANNED - len(out))))
            out.extend(first if priority is None else sorted(first, key=priority))
        return out


def next_to_ask(
    waiting: Iterable[T],
    program_of: Callable[[T], str],
    refused_programs: set[str],
    refused_tenants: set[str],
) -> T | None:
    """The request of ``waiting`` (queue order) to ask ``may_run`` of next, given the programs
    and tenants refused this step (the caller adds each refusal); None: ask no more."""
    if len(refused_tenants) > MAX_OTHER_TENANTS:
        return None
    for request in islice(waiting, MAX_SCANNED):
        program_id = program_of(request)
        if program_id in refused_programs or tenant_of(program_id) in refused_tenants:
            continue
        return request
    return None


def ask_in_turn(
    waiting: Iterable[T],
    program_of: Callable[[T], str],
    may_run: Callable[[T], bool],
    refused_programs: set[str],
    refused_tenants: set[str],
    on_refused: Callable[[str], None] | None = None,
) -> Iterator[T]:
    """Each request ``next_to_ask`` names, in turn, that ``may_run`` (load control) lets run;
    a refusal is added to ``refused_programs`` and ``refused_tenants`` (this step's), and its
    tenant told to ``on_refused`` (``TenantQueue.refused``)."""
    pending = list(islice(waiting, MAX_SCANNED))
    while (request := next_to_ask(pending, program_of, refused_programs,
                                  refused_tenants)) is not None:  # fmt: skip
        pending.remove(request)
        if may_run(request):
            yield request
        else:
            program_id = program_of(request)
            refused_programs.add(program_id)
            refused_tenants.add(tenant_of(program_id))
            if on_refused is not None:
                on_refused(tenant_of(program_id))
