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

Each call reads at most ``MAX_SCANNED`` waiting requests.  With one tenant nothing passes a
refused head: the queue behaves as without tenants.  The tenant of a request is its
program's (``ids.tenant_of``: "" for a program without a tenant, an anonymous request's among
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TypeVar

from ..ids import tenant_of

__all__ = ["MAX_OTHER_TENANTS", "MAX_SCANNED", "ask_in_turn", "next_to_ask"]

#: Tenants, besides the refused head's, whose first waiting program one step may ask about.
MAX_OTHER_TENANTS = 3
#: Waiting requests one call reads (the rest of the queue is not looked at).
MAX_SCANNED = 256

T = TypeVar("T")


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
) -> Iterator[T]:
    """Each request ``next_to_ask`` names, in turn, that ``may_run`` (load control) lets run;
    a refusal is added to ``refused_programs`` and ``refused_tenants`` (this step's)."""
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
