"""``TTLPolicyRouter``: Ray Serve's ``RequestRouter`` answered by ``ttlpolicy.ProgramRouter``.

Select it on the model deployment::

    RequestRouterConfig(
        request_router_class="ttlpolicy_ray.TTLPolicyRouter",
        request_router_kwargs={"policy": '{"max_ttl_s": 30}'},  # optional PolicyConfig JSON
        request_routing_stats_period_s=1.0,
    )

and let the replicas report (``ttlpolicy_ray.RoutingStatsMixin``, ``report.py``).  The router
is a translator; every decision is the library's (``ttlpolicy.ProgramRouter``, see its doc):

* Replicas are the router's instances, named by ``ReplicaID.unique_id``: registered when Ray
  lists them (``update_replicas``, or first seen among the candidates), removed when Ray drops
  them or reports them dead (``on_replica_actor_died``: ``ProgramRouter.remove_instance``) —
  their programs are released and route as new, their slot is free (replicas that come and
  go never fill the table), and the id is never routed to again (a restarted replica gets a
  new one; the last ``MAX_GONE_REPLICAS`` removed ids are remembered, the oldest forgotten).
  A replica beyond ``max_instances`` live ones is not registered (counted): Ray's ranks still
  reach it.
* Before each decision, each candidate's routing stats (``REPORT_KEY``) are applied once per
  report (``seq``): ``ProgramRouter.report`` with its figures (the return queue's when the
  replica gives them), then ``ProgramRouter.evicted`` for each ``evicted`` entry, then
  ``ProgramRouter.pinned`` for each pin (its remaining seconds on the router's clock, less
  the report's age) — evictions first: a report listing both for one program saw its
  context evicted, then rebuilt and pinned.  Neither is applied for a program routed after
  the report was taken (the report predates that call) or ended (its last turn was routed;
  a replica it left holds its pin until the TTL runs out).  A report is a replica's claim,
  checked: its ``block_size`` is its own (an int in [1, ``MAX_BLOCK_SIZE``], else the report
  is ignored), and its block figures are converted to the router's block of
  ``DEFAULT_BLOCK_SIZE`` tokens (a replica's block size applies to no other); at most
  ``MAX_REPORT_PINS`` pins and ``MAX_REPORT_EVICTED`` evictions are read (the rest counted);
  a pin sets a home only where ``ProgramRouter.pinned`` accepts it (live at the router's
  ``now``, and not for a program the router homes at another replica).
* A call: ``program_of`` (identity.py) names the program, ``tenant_of`` its tenant (from the
  request's ``cache_salt``, or the ``vllm_xargs`` field ``tenant_field`` names),
  ``program_key`` the router's key of the pair (a session from Ray's ``x-session-id`` or a
  client's headers is carried into the body for the engine: ``carry_session``);
  ``blocks_needed`` is its prompt and output
  cap in the router's block, ``prefix_tokens`` its prompt; ``ProgramRouter.route`` answers.
  The chosen replica is Ray's first rank, the others its second (Ray moves on when the first
  is at ``max_ongoing_requests`` or unreachable).  Anonymous calls route as one-call programs,
  forgotten at once — unless ``infer_programs`` (``TTLPOLICY_INFER_PROGRAMS=1``): then each is
  linked to the program whose recent call its prompt's text continues, within its tenant
  (``inference.py``), and routes as that program (to its home); a last turn
  (``vllm_xargs["last_turn"]``) ends the program (of its tenant: another tenant's last turn
  naming the same id ends another program).
* Bad input never loses a request: a report the library refuses (NaN, negative figures,
  free > total, a return queue longer than the queue or given half, a wrong version, a bad
  block size) is ignored and counted; a pin or an eviction it refuses (over-long id, NaN,
  negative) likewise; when no candidate has reported yet, or the library refuses the call, Ray's
  candidates are returned as one rank (Ray picks among them by queue length).  ``counters``
  says how often each happened.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

import ttlpolicy
from ttlpolicy.ids import INFERRED_PREFIX
from ttlpolicy.serving.inferred import LINK_COUNTERS, InferredPrograms
from ttlpolicy.serving.knobs import INFER_PROGRAMS, env_bool

from . import _registry
from .identity import (
    Tenancy,
    carry_session,
    program_key,
    program_of,
    request_tokens,
    tenant_of_request,
)
from .inference import prompt_hashes
from .report import DEFAULT_MAX_EVICTED, DEFAULT_MAX_PINS, REPORT_VERSION, ReplicaReport

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "MAX_BLOCK_SIZE",
    "MAX_GONE_REPLICAS",
    "MAX_REPORT_EVICTED",
    "MAX_REPORT_PINS",
    "TTLPolicyRouter",
    "live_routers",
]

logger = logging.getLogger("ray.serve.ttlpolicy_ray")

#: Tokens per block of the router's own figures (vLLM's default block): each replica's block
#: figures are converted from its reported block size to this one.
DEFAULT_BLOCK_SIZE = 16
#: The largest block size a replica may report, in tokens.
MAX_BLOCK_SIZE = 1 << 16
#: Pins read from one report (what a replica lists by default); the rest are dropped and
#: counted (``pins_over_cap``): a report costs the router at most this many ``pinned`` calls.
MAX_REPORT_PINS = DEFAULT_MAX_PINS
#: Evictions read from one report (likewise; ``evicted_over_cap``).
MAX_REPORT_EVICTED = DEFAULT_MAX_EVICTED
#: Removed replica ids remembered (never registered again), the oldest forgotten first.
MAX_GONE_REPLICAS = 4096
#: Prefix of the id under which an anonymous call is routed (no client id starts with NUL).
ANONYMOUS = "\x00anonymous:"
#: Prefix of the router's inferred programs (``infer_programs``): apart from the engines'
#: (``INFERRED_PREFIX``), whose keys their own linkers make and mean nothing here.
ROUTED_PREFIX = "\x00routed:"


def live_routers() -> list[TTLPolicyRouter]:
    """The ``TTLPolicyRouter`` objects made in this process (Ray makes one per deployment
    handle and keeps it; a handle called from a driver routes in the driver's process)."""
    return list(_registry.ROUTERS)


class TTLPolicyRouter(RequestRouter):
    """Routes a program's calls to the replica holding its pin (see the module doc)."""

    def initialize_state(
        self,
        policy: str | None = None,
        max_programs: int | None = None,
        max_instances: int | None = None,
        tenant_field: str | None = None,
        infer_programs: bool | None = None,
        **_: Any,
    ) -> None:
        """``request_router_kwargs``: ``policy``, a ``PolicyConfig`` as JSON (as the engines'
        ``TTLPOLICY_POLICY``; its miss model and queueing delay price a call); ``max_programs``
        and ``max_instances``, the router's bounds (None: ``ProgramRouter``'s own defaults);
        ``tenant_field``, where a program's tenant comes from: None, the request's
        ``cache_salt``; else the name of a ``vllm_xargs`` field that the operator's gateway
        sets (and clients cannot); ``infer_programs``, link calls that name no program to
        programs from their prompts (None: ``TTLPOLICY_INFER_PROGRAMS``, default off)."""
        self._tenancy = Tenancy(tenant_field)  # (checks the name)
        if infer_programs is None:
            infer_programs = env_bool(INFER_PROGRAMS, False)
        self.inferred = (
            InferredPrograms(self._count_link, ROUTED_PREFIX) if infer_programs else None
        )
        self._config = ttlpolicy.PolicyConfig.for_engine(policy)
        # replicas removed, never routed to again (bounded: the oldest forgotten first)
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._max_gone = MAX_GONE_REPLICAS
        bounds = {"max_instances": max_instances, "max_programs": max_programs}
        self.program_router = ttlpolicy.ProgramRouter(
            ttlpolicy.TTLPolicy(self._config),
            **{name: value for name, value in bounds.items() if value is not None},
        )
        self._max_programs = self.program_router.max_programs
        self._registered: set[str] = set()  # instances registered and not removed
        # per registered (or removed) instance: the seq of the last report read
        self._seq: dict[str, Any] = {}
        # program -> wall time of its last routed call (bounded like the router's table)
        self._routed_at: OrderedDict[str, float] = OrderedDict()
        self.counters: dict[str, int] = {
            "routed": 0,  # calls the library routed
            "anonymous": 0,  # ... of which had no (valid) program id
            "fallback": 0,  # calls handed back to Ray's choice (no report yet, refused call)
            "reports": 0,  # reports applied
            "reports_ignored": 0,  # reports refused (bad figures, drained replica, version)
            "pins": 0,  # pins applied
            "pins_ignored": 0,  # pins malformed or older than the program's last call
            # pins the library refused: expired, or a program it homes at another replica
            # (or unknown while its table is full)
            "pins_refused": 0,
            "pins_over_cap": 0,  # pins past MAX_REPORT_PINS in one report, not read
            "evicted": 0,  # evictions that freed a program (it routes as new)
            # evictions applied that freed none: held most, not its home (it moved since),
            # or freed already (a replica lists an eviction until the program returns)
            "evicted_unchanged": 0,
            "evicted_ignored": 0,  # evictions refused or older than the program's last call
            "evicted_over_cap": 0,  # evictions past MAX_REPORT_EVICTED in one report
            "drained": 0,  # replicas removed (gone or dead)
            "instances_refused": 0,  # replicas not registered: max_instances live already
            # calls whose session (a header) was carried into vllm_xargs for the engine
            "sessions_carried": 0,
            # calls without an id, with infer_programs: linked to a program from their
            # prompt, linked as a fork (never at a router: it sees no call run), or new
            **dict.fromkeys(LINK_COUNTERS.values(), 0),
        }
        if self not in _registry.ROUTERS:
            _registry.ROUTERS.append(self)

    def _count_link(self, kind: str) -> None:
        self.counters[LINK_COUNTERS[kind]] += 1

    # -- state ----------------------------------------------------------------------------
    def _ensure_state(self) -> None:
        # Ray calls initialize_state only with request_router_kwargs set; default it here.
        if not hasattr(self, "program_router"):
            self.initialize_state()

    def _register(self, iid: str) -> None:
        if iid in self._registered or iid in self._gone:
            return  # (Ray gives a restarted replica a new id)
        try:
            self.program_router.add_instance(iid)
        except ValueError as e:  # max_instances live replicas: Ray's ranks still reach it
            first = self.counters["instances_refused"] == 0
            self.counters["instances_refused"] += 1
            # (once: it is tried again each time Ray lists it)
            logger.log(logging.WARNING if first else logging.DEBUG,
                       "ttlpolicy router: replica %s not registered: %s", iid, e)  # fmt: skip
            return
        self._registered.add(iid)

    def _remove(self, iid: str) -> None:
        self._gone[iid] = None
        self._gone.move_to_end(iid)
        while len(self._gone) > self._max_gone:
            forgotten, _ = self._gone.popitem(last=False)
            self._seq.pop(forgotten, None)
        if iid in self._registered:
            self._registered.discard(iid)
            self.program_router.remove_instance(iid)
            self.counters["drained"] += 1

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        self._ensure_state()
        super().update_replicas(replicas)
        now_ids = {r.replica_id.unique_id for r in replicas}
        for iid in sorted(self._registered - now_ids):
            self._remove(iid)
        for iid in sorted(now_ids):
            self._register(iid)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        self._ensure_state()
        super().on_replica_actor_died(replica_id)
        self._remove(replica_id.unique_id)

    # -- reports --------------------------------------------------------------------------
    def _apply_report(self, replica: RunningReplica, now: float, wall: float) -> None:
        iid = replica.replica_id.unique_id
        rep = ReplicaReport.read(replica.routing_stats)
        if rep is None:
            return  # not reported yet (or not a ttlpolicy replica)
        seq = rep.seq
        if iid in self._seq and self._seq[iid] == seq:
            return  # applied (or ignored) already
        if iid in self._registered or iid in self._gone:  # (bounded: both are)
            self._seq[iid] = seq
        router = self.program_router
        try:
            if rep.v != REPORT_VERSION:
                raise ValueError(f"v must be {REPORT_VERSION}, got {rep.v!r}")
            if iid not in self._registered:
                raise ValueError(f"instance {iid!r} is drained")
            block_size = rep.block_size
            if type(block_size) is not int or not 1 <= block_size <= MAX_BLOCK_SIZE:
                raise ValueError(
                    f"block_size must be an int in [1, {MAX_BLOCK_SIZE}], got {block_size!r}"
                )
            blocks = _Blocks(block_size)
            ok = router.report(
                iid,
                blocks(rep.free_blocks),
                blocks(rep.total_blocks),
                rep.queue_len,
                rep.queued_tokens,
                blocks(rep.working_set_blocks),
                rep.cached_fraction,
                rep.return_queue_len,
                rep.return_queued_tokens,
            )
            if not ok:
                raise ValueError(f"instance {iid!r} is drained")
            at = rep.at
            age = wall - at if type(at) is float and wall >= at else 0.0
        except (TypeError, ValueError, KeyError) as e:
            self.counters["reports_ignored"] += 1
            logger.warning("ttlpolicy router: report of replica %s ignored: %s", iid, e)
            return
        self.counters["reports"] += 1
        for pid, held in self._entries(rep.evicted, MAX_REPORT_EVICTED, "evicted", 2):
            try:
                if self._routed_since(pid, at):
                    raise ValueError("eviction older than the program's last call")
                freed = router.evicted(iid, pid, blocks(held))
            except (TypeError, ValueError, KeyError):
                self.counters["evicted_ignored"] += 1
                continue
            self.counters["evicted" if freed else "evicted_unchanged"] += 1
        for pid, left, n in self._entries(rep.pins, MAX_REPORT_PINS, "pins", 3):
            try:
                if self._routed_since(pid, at):
                    raise ValueError("pin older than the program's last call")
                if not isinstance(left, int | float) or isinstance(left, bool):
                    raise TypeError(f"remaining_s must be a number, got {type(left).__name__}")
                accepted = router.pinned(iid, pid, now - age + left, blocks(n), now)
            except (TypeError, ValueError, KeyError, OverflowError):
                self.counters["pins_ignored"] += 1
                continue
            self.counters["pins" if accepted else "pins_refused"] += 1

    def _entries(self, entries: Any, cap: int, kind: str, size: int) -> list[Any]:
        """The first ``cap`` entries of a report's list ``kind`` of ``size``-lists (the rest
        counted as over the cap; a malformed entry counted as ignored, and so is one of a
        program its engine inferred: the engine's linker made its key, which names no
        program here)."""
        if not isinstance(entries, list):
            return []
        self.counters[f"{kind}_over_cap"] += max(0, len(entries) - cap)
        read = [
            e
            for e in entries[:cap]
            if isinstance(e, list | tuple)
            and len(e) == size
            and not (isinstance(e[0], str) and INFERRED_PREFIX in e[0])
        ]
        self.counters[f"{kind}_ignored"] += min(cap, len(entries)) - len(read)
        return read

    def _routed_since(self, pid: Any, at: Any) -> bool:
        """Was the program routed after a report taken at ``at`` (or has it ended)?"""
        routed = self._routed_at.get(pid) if isinstance(pid, str) else None
        return routed is not None and isinstance(at, float) and routed >= at

    # -- the decision ---------------------------------------------------------------------
    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        self._ensure_state()
        if not candidate_replicas:
            return []
        now, wall = time.monotonic(), time.time()
        for r in candidate_replicas:
            self._register(r.replica_id.unique_id)
            self._apply_report(r, now, wall)
        info = program_of(pending_request) if pending_request is not None else None
        tenant = tenant_of_request(pending_request, self._tenancy)
        if info is None and self.inferred is not None and pending_request is not None:
            hashes = prompt_hashes(pending_request)
            info = self.inferred.routed(tenant, hashes, now)
            pid = info.program_id  # (the tenant's already)
        elif info is None:
            rid = getattr(getattr(pending_request, "metadata", None), "internal_request_id", "")
            pid = ANONYMOUS + (rid if isinstance(rid, str) else "")
        else:
            pid = program_key(tenant, info.program_id)
            if carry_session(pending_request, info.program_id):
                self.counters["sessions_carried"] += 1
        prompt, out = request_tokens(pending_request)
        blocks = -(-(prompt + out) // DEFAULT_BLOCK_SIZE)
        router = self.program_router
        try:
            chosen = router.route(pid, now, blocks, prompt)
        except (TypeError, ValueError, KeyError) as e:
            # no candidate reported yet, or a call the library refuses: Ray's choice
            self.counters["fallback"] += 1
            logger.debug("ttlpolicy router: Ray's choice for %r: %s", pid[:64], e)
            return [list(candidate_replicas)]
        self.counters["routed"] += 1
        if info is None:
            self.counters["anonymous"] += 1
            router.end_program(pid)
        else:
            # an ended program's pins are ignored from now on (a replica it left keeps one
            # until its TTL): its time is +inf until it calls again
            self._routed_at[pid] = float("inf") if info.last_turn else wall
            self._routed_at.move_to_end(pid)
            while len(self._routed_at) > self._max_programs:
                self._routed_at.popitem(last=False)
            if info.last_turn:
                router.end_program(pid)
        first = [r for r in candidate_replicas if r.replica_id.unique_id == chosen]
        rest = [r for r in candidate_replicas if r.replica_id.unique_id != chosen]
        if not first:  # routed to a replica Ray no longer lists: Ray's choice
            self.counters["fallback"] += 1
            return [rest]
        return [first, rest] if rest else [first]


class _Blocks:
    """Converts a replica's block counts to the router's blocks (``DEFAULT_BLOCK_SIZE``
    tokens); anything but a non-negative int passes as it is, for the library to refuse."""

    __slots__ = ("block_size",)

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size

    def __call__(self, count: Any) -> Any:
        if type(count) is not int or count < 0:
            return count
        return count * self.block_size // DEFAULT_BLOCK_SIZE
