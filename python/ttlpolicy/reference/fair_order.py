"""The order a bounded table of programs forgets in, shared fairly among tenants.

Programs are kept oldest first (by when they were last touched), each of its tenant
(``tenants.tenant_of`` its id).  When tenant ``T``'s new program finds the table at its
bound, the one to forget (chosen before the new one joins) is the oldest of all — unless
``T`` holds more programs here than that one's tenant, then ``T``'s own oldest.  So a
tenant flooding the table pushes out only the programs of tenants holding at least as many
as it, and once it holds the most it churns its own (the rule the linker's, the router's and
the tool history's tables follow too).  Used for the programs the router homes and the idle
programs ``ProgramScheduler`` and ``AdmissionControl`` remember.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from .tenants import tenant_of

__all__ = ["FairOrder"]


class _Own:
    __slots__ = ("peak", "programs")

    def __init__(self) -> None:
        self.programs: OrderedDict[str, None] = OrderedDict()  # oldest first
        self.peak = 0  # the most held since ``programs`` was made (its table's size)


class FairOrder:
    """Program ids, oldest first, with each tenant's own order (module doc)."""

    __slots__ = ("_all", "_tenants")

    def __init__(self) -> None:
        self._all: OrderedDict[str, None] = OrderedDict()
        self._tenants: dict[str, _Own] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, pid: object) -> bool:
        return pid in self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def touch(self, pid: str) -> None:
        """``pid`` is the newest now (added if new)."""
        tenant = tenant_of(pid)
        self._all[pid] = None
        self._all.move_to_end(pid)
        own = self._tenants.get(tenant)
        if own is None:
            own = self._tenants[tenant] = _Own()
        own.programs[pid] = None
        own.programs.move_to_end(pid)
        own.peak = max(own.peak, len(own.programs))

    def discard(self, pid: str) -> None:
        """``pid`` is no longer kept (nothing if it was not)."""
        if pid not in self._all:
            return
        del self._all[pid]
        tenant = tenant_of(pid)
        own = self._tenants[tenant]
        del own.programs[pid]
        if not own.programs:
            del self._tenants[tenant]
        elif own.peak > 64 and 4 * len(own.programs) < own.peak:  # (a dict never shrinks)
            own.programs, own.peak = OrderedDict(own.programs), len(own.programs)

    def victim(self, tenant: str) -> str:
        """The program to forget to make room for a new one of ``tenant`` (module doc); not
        empty."""
        oldest = next(iter(self._all))
        own = self._tenants.get(tenant)
        if own is not None and len(own.programs) > len(self._tenants[tenant_of(oldest)].programs):
            return next(iter(own.programs))
        return oldest
