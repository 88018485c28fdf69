"""Tool-duration history: how long each tool took, over a sliding window.

Per tool, the last ``window`` durations; beside them one global window of the last
``window`` durations of any tool.  Windows are kept sorted as well as in arrival order, so a
CDF lookup is a binary search and the solver scans a sorted slice.

**Tenants.** A tool is a ``(tenant, name)`` pair: each tenant's ``bash`` has its own window,
so one tenant's gaps never shape another's pins.  ``tenant`` is any str of at most
``MAX_ID_BYTES`` bytes (the scheduler passes ``tenants.tenant_of`` the program id); ``""`` is
the shared namespace of requests that name no tenant.  The global window is every tenant's
(the fallback of a tool with few samples: design.md, "Security and tenancy").

**Bounds.** Tool names are client input (the model's output, which the prompt steers), so at
most ``max_tools`` tools are tracked, shared fairly among tenants (``""`` one of them): a new
tool of tenant ``T`` in a full table replaces the table's least recently observed tool —
unless ``T`` holds more tools than that one's tenant, then ``T``'s own least recently observed.
So a tenant returning from many new names pushes out only the tools of tenants that hold at
least as many as it does, and once it holds the most it churns its own.  (The linker shares
its bounds by the same rule, ``linker``.)
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from typing import Any

from .._validate import check_tenant, int_in, non_negative, tool_key
from ._sync import synchronized

MAX_WINDOW = 1 << 20
MAX_TOOLS = 1 << 20


def back_within(sorted_s: list[float], elapsed_s: float, horizon_s: float) -> tuple[int, int]:
    """``(within, longer)``: of the sorted durations ``D``, how many lie in
    ``(elapsed_s, elapsed_s + horizon_s]`` and how many exceed ``elapsed_s``, so that
    P(D <= e + h | D > e) = within / longer (``longer`` 0: nothing recorded lasted that long).
    The admission rule's expected working set and the host tiers' eviction rank
    (``OnlineGroupTTL.eviction_rank``) both use it."""
    longer = bisect.bisect_right(sorted_s, elapsed_s)
    return bisect.bisect_right(sorted_s, elapsed_s + horizon_s) - longer, len(sorted_s) - longer


class DurationWindow:
    """The last ``capacity`` durations, in arrival order and sorted."""

    __slots__ = ("capacity", "order", "sorted")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: deque[float] = deque()
        self.sorted: list[float] = []

    def push(self, x: float) -> None:
        if len(self.order) == self.capacity:
            old = self.order.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, old)]
        self.order.append(x)
        bisect.insort_right(self.sorted, x)

    def __len__(self) -> int:
        return len(self.order)

    def cdf(self, t_s: float) -> float:
        n = len(self.sorted)
        return bisect.bisect_right(self.sorted, t_s) / n if n else 0.0

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile: the smallest sample x with P(≤ x) ≥ q."""
        n = len(self.sorted)
        if n == 0:
            return None
        rank = max(1, math.ceil(q * n))
        return self.sorted[min(rank, n) - 1]

    def mean(self) -> float | None:
        n = len(self.order)
        if n == 0:
            return None
        total = 0.0
        for x in self.order:
            total += x
        return total / n


@synchronized
class ToolHistory:
    """Sliding windows of tool durations, per (tenant, tool) and global, with caps on tracked
    tools (see the module doc)."""

    def __init__(self, window: int = 1024, max_tools: int = 1024) -> None:
        self._window = int_in("window", window, 1, MAX_WINDOW)
        self._max_tools = int_in("max_tools", max_tools, 1, MAX_TOOLS)
        # (tenant, name) -> window, least recently observed first
        self._tools: OrderedDict[tuple[str, str], DurationWindow] = OrderedDict()
        # tenant -> its names, least recently observed first
        self._tenants: dict[str, OrderedDict[str, None]] = {}
        self._global = DurationWindow(self._window)

    @property
    def window(self) -> int:
        """Durations kept per tool and globally (the last ``window``)."""
        return self._window

    @property
    def max_tools(self) -> int:
        """The most tools tracked (tool names come from clients)."""
        return self._max_tools

    def observe(self, tool: Any, duration_s: Any, tenant: Any = "") -> None:
        """Record one duration of ``tenant``'s ``tool`` (None: unknown tool, global window
        only)."""
        who = check_tenant(tenant)
        key = tool_key(tool)
        d = non_negative("duration_s", duration_s)
        if key is not None:
            w = self._tools.get((who, key))
            if w is None:
                w = self._admit(who, key)
            else:
                self._tools.move_to_end((who, key))
                self._tenants[who].move_to_end(key)
            w.push(d)
        self._global.push(d)

    def _admit(self, tenant: str, key: str) -> DurationWindow:
        if len(self._tools) >= self._max_tools:  # room, as the module doc says
            oldest = next(iter(self._tools))
            own = self._tenants.get(tenant)
            if own is not None and len(own) > len(self._tenants[oldest[0]]):
                oldest = (tenant, next(iter(own)))
            self._drop(*oldest)
        own = self._tenants.setdefault(tenant, OrderedDict())
        own[key] = None
        w = self._tools[(tenant, key)] = DurationWindow(self._window)
        return w

    def _drop(self, tenant: str, key: str) -> None:
        del self._tools[(tenant, key)]
        own = self._tenants[tenant]
        del own[key]
        if not own:
            del self._tenants[tenant]

    def _window_of(self, tool: Any, tenant: Any) -> DurationWindow | None:
        who = check_tenant(tenant)
        key = tool_key(tool)
        return self._global if key is None else self._tools.get((who, key))

    def count(self, tool: Any, tenant: Any = "") -> int:
        """Samples held for ``tenant``'s ``tool`` (None: the global window)."""
        w = self._window_of(tool, tenant)
        return len(w) if w is not None else 0

    def total_count(self) -> int:
        """Durations in the global window."""
        return len(self._global)

    def num_tools(self) -> int:
        """Tools tracked now, of every tenant."""
        return len(self._tools)

    def tools(self, tenant: Any = "") -> list[str]:
        """``tenant``'s tracked tools, least recently observed first."""
        return list(self._tenants.get(check_tenant(tenant), ()))

    def cdf(self, tool: Any, t_s: Any, tenant: Any = "") -> float:
        """Fraction of ``tenant``'s ``tool``'s samples ≤ t_s (0.0 with no samples)."""
        who = check_tenant(tenant)
        t = non_negative("t_s", t_s)
        w = self._window_of(tool, who)
        return w.cdf(t) if w is not None else 0.0

    def quantile(self, tool: Any, q: Any, tenant: Any = "") -> float | None:
        """Nearest-rank quantile of ``tenant``'s ``tool``'s samples; None with no samples."""
        who = check_tenant(tenant)
        qq = non_negative("q", q)
        if qq > 1.0:
            raise ValueError(f"q must be in [0, 1], got {qq!r}")
        w = self._window_of(tool, who)
        return w.quantile(qq) if w is not None else None

    def mean(self, tool: Any, tenant: Any = "") -> float | None:
        """Mean duration (s) of ``tenant``'s ``tool`` (None: the global window); None when
        empty."""
        w = self._window_of(tool, tenant)
        return w.mean() if w is not None else None

    def samples(self, tool: Any, tenant: Any = "") -> list[float]:
        """The window's samples, sorted ascending."""
        w = self._window_of(tool, tenant)
        return list(w.sorted) if w is not None else []


# The reference's own readers (the policy, load control) take a window's sorted samples
# without a copy; these are not part of the classes' surface, which the native ones share.
def tool_window(history: ToolHistory, tool: Any, tenant: Any = "") -> DurationWindow | None:
    """``tenant``'s ``tool``'s window in ``history`` (None: not tracked; a None tool: the
    global one)."""
    return history._window_of(tool, tenant)


def global_window(history: ToolHistory) -> DurationWindow:
    """``history``'s window over every tool."""
    return history._global
