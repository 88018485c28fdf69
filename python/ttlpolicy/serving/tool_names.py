"""How many tool names a tenant brings into the shared tool statistics.

The library's tool-gap statistics keep one window per tool name for every tenant, at most
1,024 names, the least recently observed dropped first (``ToolHistory``).  Tool names are
client input (``vllm_xargs.tool``, or the model's output, which the prompt steers), so one
tenant returning from many new names would push every other tenant's tools out of that
table (docs/design.md, "Security and tenancy").  ``TenantToolNames`` is the gate the engine
adapters put before the library: a tenant's call may carry a name the tenant used recently,
or a new one while the tenant holds fewer than ``PER_TENANT_NAMES`` names used within
``NAME_IDLE_S``; any other name is passed on as no name (the call's gap then feeds only the
all-tools window).  So pushing another tenant's tool out of the table takes the names of
``1024 / PER_TENANT_NAMES`` tenants.  Requests of no tenant (the shared namespace) are not
gated.  Bounded: at most ``MAX_TENANTS`` tenants, the least recently seen forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MAX_TENANTS", "NAME_IDLE_S", "PER_TENANT_NAMES", "TenantToolNames"]

#: Names one tenant may hold in the shared statistics at once.
PER_TENANT_NAMES = 64
#: A name unused this long (s) frees its place in its tenant's names.
NAME_IDLE_S = 3600.0
#: Tenants whose names are remembered (the least recently seen forgotten first).
MAX_TENANTS = 4096


class TenantToolNames:
    """The gate (module doc): ``admit`` says what tool name a call may give the library."""

    def __init__(self, per_tenant: int = PER_TENANT_NAMES, idle_s: float = NAME_IDLE_S,
                 max_tenants: int = MAX_TENANTS) -> None:  # fmt: skip
        self.per_tenant, self.idle_s, self.max_tenants = per_tenant, idle_s, max_tenants
        # tenant -> its names -> when each was last used, s (tenants least recently seen first)
        self._names: OrderedDict[str, dict[str, float]] = OrderedDict()
        #: calls whose tool name was passed on as none (their tenant's names were full)
        self.refused = 0

    @property
    def tenant_count(self) -> int:
        """Tenants whose names are remembered."""
        return len(self._names)

    def admit(self, tenant: str, tool: str | None, now: float) -> str | None:
        """``tool`` if ``tenant`` (a tenant key; "": none) may give it to the library at
        ``now``, else None."""
        if tool is None or not tenant:
            return tool
        names = self._names.get(tenant)
        if names is None:
            if len(self._names) >= self.max_tenants:
                self._names.popitem(last=False)
            names = self._names[tenant] = {}
        else:
            self._names.move_to_end(tenant)
        if tool not in names and len(names) >= self.per_tenant:
            for stale in [n for n, used_s in names.items() if now - used_s > self.idle_s]:
                del names[stale]
            if len(names) >= self.per_tenant:
                self.refused += 1
                return None
        names[tool] = now
        return tool
