"""The pin table: which programs hold pinned KV blocks, how many, and until when.

A program holds at most one pin; a second pin while the first is held (parallel requests of
one program) merges into it: blocks add up, the later deadline wins.  Two orders matter:

* expiry — by ``(deadline_s, program_id)``: a min-heap, entries invalidated lazily;
* reclaim under memory pressure — latest-arrived program first, by the program's FCFS
  position (the order it was first seen, which follows arrival) descending.

Tenants share the pin budget (docs/design.md, "Scheduling"): a program's tenant is read from
its id (``tenants.tenant_of``).  The *active* tenants — those with a pin or a live request —
share it in proportion to their weights (``tenants``: 1 each unless ``tenant_weights`` says
otherwise): a tenant's share is ``budget · weight / W``, ``W`` the active tenants' summed
weight, and it is over its share when ``blocks · W > budget · weight`` (exactly, in
integers).  ``make_room`` says which pins a finishing program may displace, ``reclaim`` takes
from the tenant furthest over its share first; "furthest" is most pinned blocks per unit of
weight (``blocks / weight``; with equal weights: most pinned blocks), ties to the greatest
tenant key.  With one tenant no tenant is ever over its share and both are as before tenants.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from .._validate import as_float, i64_field, id_field, unchecked
from .tenants import TENANT_KEY_CHARS, TENANT_PREFIX, tenant_of

__all__ = ["TENANT_KEY_CHARS", "TENANT_PREFIX", "Pin", "PinTable", "tenant_of"]


class _Tenant:
    """A tenant's pinned ``blocks``, its pinned programs' FCFS positions (``orders``), its
    ``live`` requests and its ``weight``; it is active while it has a pin or a live request."""

    __slots__ = ("blocks", "live", "orders", "weight")

    def __init__(self, weight: int) -> None:
        self.blocks = 0
        self.live = 0
        self.orders: dict[str, int] = {}
        self.weight = weight

    def over(self, budget: int, total_weight: int) -> bool:
        """Is it over its share of ``budget`` among tenants weighing ``total_weight``?"""
        return self.blocks * total_weight > budget * self.weight

    def usage(self) -> Fraction:
        """Pinned blocks per unit of weight: the furthest over its share has the most."""
        return Fraction(self.blocks, self.weight)

    def latest(self, keep_until: int | None) -> str | None:
        """Its latest-arrived pinned program, None if none is younger than ``keep_until``."""
        if not self.orders:
            return None
        pid = max(self.orders, key=self.orders.__getitem__)
        return None if keep_until is not None and self.orders[pid] <= keep_until else pid


@dataclass(frozen=True, slots=True)
class Pin:
    """``blocks`` KV blocks of ``program_id`` kept in memory until ``deadline_s``."""

    program_id: str
    blocks: int
    deadline_s: float

    def __post_init__(self) -> None:
        # a caller's values checked as the native class converts them (its maker's: unchecked)
        object.__setattr__(self, "program_id", id_field("program_id", self.program_id))
        object.__setattr__(self, "blocks", i64_field("blocks", self.blocks))
        object.__setattr__(self, "deadline_s", as_float("deadline_s", self.deadline_s))


class PinTable:
    """``weights``: a checked ``tenant_weights`` table (``tenants.check_tenant_weights``)."""

    def __init__(self, weights: Mapping[str, int] | None = None) -> None:
        self._weights = dict(weights or {})
        self._weight = 0  # the active tenants' summed weight
        self._pins: dict[str, Pin] = {}
        self._order: dict[str, int] = {}  # each pinned program's FCFS position, for reclaim
        # (deadline_s, program_id); an entry is live iff it matches the current pin.
        self._deadlines: list[tuple[float, str]] = []
        self.blocks = 0
        self._tenants: dict[str, _Tenant] = {}  # the active ones

    def _tenant(self, program_id: str) -> tuple[str, _Tenant]:
        key = tenant_of(program_id)
        tenant = self._tenants.get(key)
        if tenant is None:
            tenant = self._tenants[key] = _Tenant(self.weight_of(key))
            self._weight += tenant.weight
        return key, tenant

    def weight_of(self, key: str) -> int:
        """The weight of the tenant ``key`` (1 unless the table names it)."""
        return self._weights.get(key, 1)

    def _settle(self, key: str, tenant: _Tenant) -> None:
        if tenant.live == 0 and not tenant.orders:
            del self._tenants[key]  # inactive: bounded by pins and live requests
            self._weight -= tenant.weight

    def live(self, program_id: str, delta: int) -> None:
        """The program's tenant has ``delta`` more live requests."""
        key, tenant = self._tenant(program_id)
        tenant.live += delta
        self._settle(key, tenant)

    @property
    def active_tenants(self) -> int:
        return len(self._tenants)

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, program_id: str) -> Pin | None:
        return self._pins.get(program_id)

    def add(self, program_id: str, blocks: int, deadline_s: float, order: int) -> Pin:
        old = self._pins.get(program_id)
        if old is not None:
            blocks += old.blocks
            deadline_s = max(deadline_s, old.deadline_s)
            self.blocks -= old.blocks
        pin = unchecked(Pin, program_id, blocks, deadline_s)
        self._pins[program_id] = pin
        self._order[program_id] = order
        self.blocks += blocks
        _, tenant = self._tenant(program_id)
        tenant.blocks += pin.blocks - (old.blocks if old is not None else 0)
        tenant.orders[program_id] = order
        if old is None or deadline_s != old.deadline_s:
            heapq.heappush(self._deadlines, (deadline_s, program_id))
            self._compact()
        return pin

    def remove(self, program_id: str) -> Pin | None:
        pin = self._pins.pop(program_id, None)
        if pin is not None:
            del self._order[program_id]
            self.blocks -= pin.blocks
            key, tenant = self._tenant(program_id)
            tenant.blocks -= pin.blocks
            del tenant.orders[program_id]
            self._settle(key, tenant)
        return pin

    def _live_top(self) -> tuple[float, str] | None:
        """Drops stale heap entries above the earliest live deadline."""
        heap = self._deadlines
        while heap:
            deadline_s, program_id = heap[0]
            pin = self._pins.get(program_id)
            if pin is not None and pin.deadline_s == deadline_s:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _compact(self) -> None:
        # Lazy deletion must not let the heap grow without bound (bounded state).
        if len(self._deadlines) > 2 * len(self._pins) + 64:
            self._deadlines = [(p.deadline_s, pid) for pid, p in self._pins.items()]
            heapq.heapify(self._deadlines)

    def next_deadline_s(self) -> float | None:
        top = self._live_top()
        return None if top is None else top[0]

    def expire(self, now: float) -> list[Pin]:
        """Removes and returns the pins with ``deadline_s <= now``, earliest first."""
        out = []
        while (top := self._live_top()) is not None and top[0] <= now:
            heapq.heappop(self._deadlines)
            pin = self.remove(top[1])
            assert pin is not None
            out.append(pin)
        return out

    def expire_before(self, now: float) -> list[Pin]:
        """Removes and returns the pins with ``deadline_s < now`` (strictly), earliest first."""
        out = []
        while (top := self._live_top()) is not None and top[0] < now:
            heapq.heappop(self._deadlines)
            pin = self.remove(top[1])
            assert pin is not None
            out.append(pin)
        return out

    def _furthest_over(self, budget: int, keep_until: int | None) -> str | None:
        """The latest eligible pin of the tenant furthest over its share, None if no tenant
        over its share has one younger than ``keep_until``."""
        w = self._weight
        over = sorted(((t.usage(), k) for k, t in self._tenants.items() if t.over(budget, w)),
                      reverse=True)  # fmt: skip
        for _, key in over:
            pid = self._tenants[key].latest(keep_until)
            if pid is not None:
                return pid
        return None

    def reclaim(self, blocks_needed: int, budget: int, keep_until: int | None = None) -> list[Pin]:
        """Removes pins until ``blocks_needed`` blocks are released or no pin is left: the
        latest pin of the tenant furthest over its share of ``budget`` while one is, then
        latest-arrived program first — keeping, when ``keep_until`` is given, the pins of
        programs whose FCFS position is at most it."""
        latest_first = iter(sorted(self._order, key=self._order.__getitem__, reverse=True))
        out: list[Pin] = []
        released = 0
        while released < blocks_needed and self._pins:
            pid = self._furthest_over(budget, keep_until)
            if pid is None:
                pid = next(p for p in latest_first if p in self._pins)
                if keep_until is not None and self._order[pid] <= keep_until:
                    break  # every pin left is of a program no younger than ``keep_until``
            pin = self.remove(pid)
            assert pin is not None
            released += pin.blocks
            out.append(pin)
        return out

    def make_room(self, program_id: str, blocks: int, budget: int) -> list[str] | None:
        """The programs whose pins go so that ``program_id`` may pin ``blocks`` more blocks
        within ``budget``: none when they fit the free budget (work-conserving); else, when its
        tenant stays within its share, the latest pins of the tenants furthest over theirs
        until they fit; None (no pin) when they cannot."""
        if self.blocks + blocks <= budget:
            return []
        key = tenant_of(program_id)
        own = self._tenants.get(key)
        weight = self.weight_of(key)
        w = self._weight + (weight if own is None else 0)
        if ((own.blocks if own is not None else 0) + blocks) * w > budget * weight:
            return None  # at or beyond its share: it takes nobody's pin
        left = {k: t.blocks for k, t in self._tenants.items() if k != key}
        queues = {k: sorted(self._tenants[k].orders, key=self._order.__getitem__) for k in left}
        free = budget - self.blocks
        out: list[str] = []
        while free < blocks:
            over = [(Fraction(b, self._tenants[k].weight), k) for k, b in left.items()
                    if b * w > budget * self._tenants[k].weight]  # fmt: skip
            if not over:
                return None
            _, victim = max(over)
            pid = queues[victim].pop()  # over its share: it still holds a pin
            left[victim] -= self._pins[pid].blocks
            free += self._pins[pid].blocks
            out.append(pid)
        return out

    def all(self) -> list[Pin]:
        """Every pin, in expiry order ``(deadline_s, program_id)``."""
        return sorted(self._pins.values(), key=lambda p: (p.deadline_s, p.program_id))
