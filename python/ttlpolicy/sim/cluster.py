"""Many engine instances behind one router: the cluster simulation.

``N`` independent ``Engine``s (each its own copy of the policy, KV cache and clock) are fed by
one router, which places every call of every program — a program's next call may land on
another instance than its last, where its cached context is not.  The engines advance in one
global event order: each engine's next step is planned, and the step that ends first runs
first; a call the router places on an engine before its planned run ends stops that run
there (as the engine's own events do); the router's own events (programs arriving, calls
issued after a tool) come before any step ending at the same instant.  With one instance the
events are the lone engine's, in its order: the same result to the bit
(``tests/sim/test_cluster.py``).

Routers (``ROUTERS``): ``round-robin``; ``least-loaded`` (fewest calls placed and not
finished, as Vidur's LOR); ``session-hash`` (rendezvous hash of the program id over the live
instances, what sticky sessions do); ``prefix`` (the longest cached prefix of the program's
context, unless the instances' outstanding calls differ by more than ``imbalance`` — then the
least loaded, as Ray Serve's ``PrefixCacheAffinityRouter``); ``ttlpolicy`` (the library's
``ProgramRouter``, fed each instance's state — its whole queue and the part a return waits
behind — before each call, each pin as it is made, and before a program's call what its
last instance's cache still holds of its context).

A program placed on another instance than its last call's leaves that one
(``Policy.program_left``: the ``ttlpolicy`` plug-in ends it there, its pin released), as a
router's plug-in would tell the replica — else load control counts the program in its
working set until it returns, maybe never (measured: docs/investigations/fleet-routers.md,
round-robin under the ``ttlpolicy`` policy); that instance looks at its queue again then.

An instance may be killed at an instant (``kill``): the router drains it, and every call
placed there and not finished is placed again, on the others, at that instant (recomputed
from scratch: its context died with the instance).
"""

from __future__ import annotations

import heapq
import itertools
import math
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import ttlpolicy as tp

from .call import ProgramRun
from .engine import Engine
from .hardware import Hardware
from .interface import EngineConfig, Policy, StepPlan
from .metrics import Metrics
from .policies import make_policy
from .policies.ttlpolicy_plugin import TTLPolicyPlugin
from .workload import ConcurrencyArrivals, Program

ROUTERS = ("round-robin", "least-loaded", "session-hash", "prefix", "ttlpolicy")

# the cluster's own events
_ARRIVE, _CALL, _KILL = 0, 1, 2
# an engine's next move, after the cluster's events of the same instant: a step (or an idle
# wait) ending, then preparing the next step
_COMMIT, _PREPARE = 1, 2


class Router:
    """Places calls on instances (``choose``) and hears what happens to them."""

    name = ""

    def bind(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        raise NotImplementedError

    def finished(self, instance: int, run: ProgramRun) -> None:
        """A call of ``run`` ended on ``instance`` (its engine has decided on a pin)."""

    def ended(self, program_id: str) -> None:
        """The program's last call ended."""

    def drained(self, instance: int) -> None:
        """The instance died: no call goes there any more."""


class RoundRobin(Router):
    name = "round-robin"

    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        self._next = 0

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        alive = self.cluster.alive
        n = len(alive)
        for k in range(n):
            i = (self._next + k) % n
            if alive[i]:
                self._next = i + 1
                return i
        raise RuntimeError("no live instance")


class LeastLoaded(Router):
    name = "least-loaded"

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        return self.cluster.least_loaded()


class SessionHash(Router):
    """Rendezvous hashing: each program goes to the live instance whose hash with its id is
    highest, so a dead instance moves only its own programs."""

    name = "session-hash"

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        key = run.program.program_id.encode()
        best, best_h = -1, -1
        for i, up in enumerate(self.cluster.alive):
            if up:
                h = zlib.crc32(key + b"\0" + str(i).encode())
                if h > best_h:
                    best, best_h = i, h
        return best


class PrefixAffinity(Router):
    """Ray Serve's ``PrefixCacheAffinityRouter``: while the outstanding calls of the live
    instances differ by at most ``imbalance``, the instance holding the longest cached prefix
    of the call (when it covers at least ``min_match`` of the prompt); else the least
    loaded."""

    name = "prefix"

    def __init__(self, imbalance: int = 10, min_match: float = 0.1) -> None:
        self.imbalance = imbalance
        self.min_match = min_match

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        c = self.cluster
        loads = [n for n, up in zip(c.outstanding, c.alive, strict=True) if up]
        if max(loads) - min(loads) <= self.imbalance:
            turn = run.program.turns[turn_index]
            pid = run.program.program_id
            b = c.config.block_tokens
            best, best_blocks = -1, 0
            for i, e in enumerate(c.engines):
                if c.alive[i]:
                    cached = min(e.kv.chain_blocks(pid), turn.reusable_blocks)
                    if cached > best_blocks:
                        best, best_blocks = i, cached
            if best >= 0 and best_blocks * b >= self.min_match * turn.input_tokens:
                return best
        return c.least_loaded()


class TTLPolicyRouter(Router):
    """The library's ``ProgramRouter`` over the instances' reported state.  It prices a miss
    and a wait with instance 0's ``TTLPolicy`` when the engines run the ``ttlpolicy``
    plug-in (its fitted miss model and queueing delay); otherwise with a policy of its own,
    whose miss model is fitted to the hardware's prefill times and whose queueing delay is
    fed the engines' waits of returning calls that lost their cache.

    Each instance reports, before each call, its calls placed and not running (the queue)
    and their prompt tokens less those its cache holds for them; the ``ttlpolicy`` plug-in
    (program-level FCFS, first calls last) also the *return queue* — those of its calls
    whose program's last call ran there — which a returning call waits behind."""

    name = "ttlpolicy"

    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        first = cluster.engines[0].policy
        self._plugins = isinstance(first, TTLPolicyPlugin)
        if isinstance(first, TTLPolicyPlugin):
            policy = first.ttl_policy
        else:
            budget = cluster.config.token_budget
            policy = tp.TTLPolicy(
                tp.PolicyConfig(
                    kv_bytes_per_token=cluster.hw.kv_bytes_per_token,
                    prefill_chunk_tokens=budget,
                )
            )
            for n in (256, 1024, 4096, 16384, 65536):
                policy.observe_prefill(n, cluster.hw.prefill_s(n, budget))
        self.policy = policy
        self.router = tp.ProgramRouter(policy, max_instances=max(1, len(cluster.engines)))
        self._ids = [str(i) for i in range(len(cluster.engines))]
        for iid in self._ids:
            self.router.add_instance(iid)
        self._waits_seen = [0] * len(cluster.engines)

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        c = self.cluster
        router = self.router
        waiting = c.waiting()
        for i, e in enumerate(c.engines):
            if not c.alive[i]:
                continue
            m = e.metrics
            if not self._plugins:  # T: the waits of returns that lost their cache
                lost = m.return_waits_lost_s
                for w in lost[self._waits_seen[i] :]:
                    self.policy.observe_queueing_delay(w)
                self._waits_seen[i] = len(lost)
            kv = e.kv
            cached = m.hit_tokens / m.input_tokens if m.input_tokens else 1.0
            queue, queued_tokens, returns, return_tokens = waiting[i]
            admission = getattr(e.policy, "admission", None)
            working = kv.used if admission is None else admission.working_set_blocks(e.now)
            if self._plugins:
                router.report(self._ids[i], kv.available(), kv.capacity, queue, queued_tokens,
                              working, cached, returns, return_tokens)  # fmt: skip
            else:  # FCFS: a return waits behind the whole queue (the default)
                router.report(
                    self._ids[i], kv.available(), kv.capacity, queue, queued_tokens, working, cached
                )
        pid = run.program.program_id
        last = c.last_instance(pid)
        turn = run.program.turns[turn_index]
        if last is not None and c.alive[last]:
            held = c.engines[last].kv.chain_blocks(pid)
            if held < turn.reusable_blocks:
                # its home evicted some of its context (as a KV-cache event would tell)
                router.evicted(self._ids[last], pid, held)
        b = c.config.block_tokens
        blocks = -(-turn.input_tokens // b)
        return int(router.route(pid, now, blocks, turn.reusable_blocks * b))

    def finished(self, instance: int, run: ProgramRun) -> None:
        policy = self.cluster.engines[instance].policy
        if isinstance(policy, TTLPolicyPlugin):
            # (the router routes by the trace's program; the engine's policy may see another
            # id for it: ``TTLPolicyPlugin.ids``)
            pid = run.program.program_id
            pin = policy.sched.pin(policy.policy_program(pid))
            if pin is not None:
                self.router.pinned(self._ids[instance], pid, pin.deadline_s, pin.blocks)

    def ended(self, program_id: str) -> None:
        self.router.end_program(program_id)

    def drained(self, instance: int) -> None:
        self.router.drain(self._ids[instance])


def make_router(name: str) -> Router:
    routers: dict[str, Callable[[], Router]] = {
        "round-robin": RoundRobin,
        "least-loaded": LeastLoaded,
        "session-hash": SessionHash,
        "prefix": PrefixAffinity,
        "ttlpolicy": TTLPolicyRouter,
    }
    if name not in routers:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {name!r}")
    return routers[name]()


class Cluster:
    """``instances`` engines of one hardware and policy (a fresh policy each) behind
    ``router`` (see the module doc)."""

    def __init__(
        self,
        hw: Hardware,
        policy: str | Callable[[], Policy],
        instances: int,
        router: str | Router,
        config: EngineConfig | None = None,
        *,
        cpu_tier: bool | None = None,
    ) -> None:
        if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            raise ValueError(f"instances must be an integer >= 1, got {instances!r}")
        if hasattr(policy, "arrive"):
            raise TypeError("a cluster needs a policy name or factory: one policy per engine")
        new_policy = (lambda: make_policy(policy)) if isinstance(policy, str) else policy
        self.hw = hw
        self.config = config or EngineConfig()
        self.engines = [
            Engine(hw, new_policy(), self.config, cpu_tier=cpu_tier) for _ in range(instances)
        ]
        if self.engines[0].policy.runs_alone:
            raise ValueError("the alone bound runs each program alone: not behind a router")
        for i, e in enumerate(self.engines):
            e.forward = self._forwarder(i)
        self.alive = [True] * instances
        self.outstanding = [0] * instances  # calls placed and not finished
        self.returns_at: set[str] = set()  # programs whose placed call follows one there
        self.killed_s: list[float | None] = [None] * instances
        self._where: dict[str, tuple[int, ProgramRun, int]] = {}  # program → its placed call
        self._last: dict[str, int] = {}  # program → the instance of its last finished call
        self._placed: list[int] = []  # instances given a call by the event in hand
        self._woken: list[int] = []  # instances a program left: they look at their queue
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._arrivals: ConcurrencyArrivals | None = None
        self.programs_done = 0
        self.router = make_router(router) if isinstance(router, str) else router
        self.router.bind(self)

    # -- workload ---------------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: Any) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, obj))

    def add_programs(self, arrivals: Iterable[tuple[float, Program]]) -> None:
        for t, prog in arrivals:
            self._push(t, _ARRIVE, prog)

    def use_concurrency(self, arrivals: ConcurrencyArrivals) -> None:
        self._arrivals = arrivals
        for prog in arrivals.initial():
            self._push(0.0, _ARRIVE, prog)

    def kill(self, instance: int, at_s: float) -> None:
        """The instance dies at ``at_s``: its calls are placed again on the others."""
        if not 0 <= instance < len(self.engines):
            raise ValueError(f"instance must be in [0, {len(self.engines) - 1}], got {instance}")
        self._push(at_s, _KILL, instance)

    def waiting(self) -> list[tuple[int, int, int, int]]:
        """Per instance, its calls placed and not running: how many and their prompt tokens
        less those its cache holds for them; the same of those whose program's last call
        ran there (returns; the rest are new programs there)."""
        out = [[0, 0, 0, 0] for _ in self.engines]
        running = [{c.program_id for c in e.running} for e in self.engines]
        b = self.config.block_tokens
        returns_at = self.returns_at
        for pid, (i, run, k) in self._where.items():
            if pid in running[i]:
                continue
            turn = run.program.turns[k]
            cached = min(self.engines[i].kv.chain_blocks(pid), turn.reusable_blocks) * b
            tokens = max(0, turn.input_tokens - cached)
            row = out[i]
            row[0] += 1
            row[1] += tokens
            if pid in returns_at:
                row[2] += 1
                row[3] += tokens
        return [(a, t, r, rt) for a, t, r, rt in out]

    def last_instance(self, program_id: str) -> int | None:
        """The instance where the program's last call ran (None: none yet)."""
        return self._last.get(program_id)

    def least_loaded(self) -> int:
        best, best_n = -1, math.inf
        for i, n in enumerate(self.outstanding):
            if self.alive[i] and n < best_n:
                best, best_n = i, n
        return best

    # -- the calls ----------------------------------------------------------------------------
    def _forwarder(self, i: int) -> Callable[[float, ProgramRun, int | None], None]:
        def forward(t: float, run: ProgramRun, turn_index: int | None) -> None:
            pid = run.program.program_id
            del self._where[pid]
            self.returns_at.discard(pid)
            self.outstanding[i] -= 1
            self.router.finished(i, run)
            self._last[pid] = i
            if turn_index is not None:
                self._push(t, _CALL, (run, turn_index))
                return
            self.router.ended(pid)
            del self._last[pid]
            self.programs_done += 1
            if self._arrivals is not None:
                prog = self._arrivals.replacement()
                if prog is not None:
                    self._push(t, _ARRIVE, prog)

        return forward

    def _place(self, t: float, run: ProgramRun, turn_index: int, starts: bool) -> int:
        i = self.router.choose(run, turn_index, t)
        if not (0 <= i < len(self.engines) and self.alive[i]):
            raise RuntimeError(f"router {self.router.name!r} chose instance {i}, not a live one")
        pid = run.program.program_id
        last = self._last.get(pid, i)
        if last != i and self.alive[last]:
            left = self.engines[last]
            if left.policy.program_left(pid):
                left.kv.unpin(pid)
            self._woken.append(last)
        self._where[pid] = (i, run, turn_index)
        if self._last.get(pid) == i:
            self.returns_at.add(pid)
        else:
            self.returns_at.discard(pid)
        self.outstanding[i] += 1
        self.engines[i].deliver(t, run, turn_index, starts)
        self._placed.append(i)
        return i

    # -- the loop -----------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> Metrics:
        engines = self.engines
        n = len(engines)
        events = self._events
        plans: list[StepPlan | None] = [None] * n
        lengths: list[tuple[int, float] | None] = [None] * n
        prepared = [False] * n
        version = [0] * n
        # (time, kind, instance, version): an engine's next move; stale versions are skipped
        moves: list[tuple[float, int, int, int]] = [(0.0, _PREPARE, i, 0) for i in range(n)]
        done = 0

        def horizon() -> float | None:
            return events[0][0] if events else None

        def schedule(i: int) -> None:
            """Queue a prepared engine's next move: its planned step's end, or (nothing to
            compute) its next own event."""
            e = engines[i]
            version[i] += 1
            plan = plans[i]
            if plan is not None:
                e.horizon_s = horizon()
                length = lengths[i] = e.run_length(plan)
                heapq.heappush(moves, (e.now + length[1], _COMMIT, i, version[i]))
                return
            t = e.next_event_s()
            if t is not None:
                heapq.heappush(moves, (max(t, e.now), _COMMIT, i, version[i]))

        while True:
            while moves and moves[0][3] != version[moves[0][2]]:
                heapq.heappop(moves)
            if events and (not moves or events[0][0] <= moves[0][0]):
                t, _, kind, obj = heapq.heappop(events)
                if kind == _KILL:
                    self._kill(obj, t)
                    version[obj] += 1  # no more moves
                elif kind == _ARRIVE:
                    self._place(t, ProgramRun(obj, t), 0, True)
                else:
                    self._place(t, obj[0], obj[1], False)
                for k in self._placed:
                    if prepared[k] and self.alive[k]:
                        schedule(k)  # the call may stop its planned run, or end its wait
                for k in self._woken:
                    if prepared[k] and plans[k] is None and self.alive[k]:
                        # waiting for an event: it looks at its queue again now
                        version[k] += 1
                        heapq.heappush(moves, (max(t, engines[k].now), _COMMIT, k, version[k]))
                self._placed.clear()
                self._woken.clear()
                continue
            if not moves:
                break
            t, kind, i, _ = heapq.heappop(moves)
            e = engines[i]
            if kind == _PREPARE:
                e.horizon_s = horizon()
                plans[i] = e.prepare()
                prepared[i] = True
                schedule(i)
                continue
            plan = plans[i]
            if plan is None:
                e.advance(max(t, e.now) - e.now)
            else:
                e.step(plan, lengths[i])
                if progress is not None and self.programs_done != done:
                    done = self.programs_done
                    progress(done)
            plans[i] = None
            prepared[i] = False
            version[i] += 1
            heapq.heappush(moves, (e.now, _PREPARE, i, version[i]))
        return self.metrics()

    def _kill(self, i: int, t: float) -> None:
        if not self.alive[i]:
            return
        if sum(self.alive) == 1:
            raise ValueError(f"instance {i} is the last one alive: its calls would be lost")
        self.alive[i] = False
        self.killed_s[i] = t
        self.router.drained(i)
        dead = self.engines[i]
        lost = [(pid, run, k) for pid, (j, run, k) in self._where.items() if j == i]
        self.outstanding[i] = 0
        for pid, run, k in lost:
            del self._where[pid]
            self.returns_at.discard(pid)
            # a first call the dead engine never started starts the program elsewhere
            starts = k == 0 and pid not in dead.metrics.program_start_s
            self._place(t, run, k, starts)

    # -- results ------------------------------------------------------------------------------
    def metrics(self) -> Metrics:
        """All instances' figures together (each program started and finished once)."""
        total = Metrics()
        for i, e in enumerate(self.engines):
            if self.alive[i]:
                e.finish_run()
            else:
                e.metrics.makespan_s = self.killed_s[i] or 0.0
            total.absorb(e.metrics)
        return total

    def instance_summaries(self) -> list[dict[str, float]]:
        """Per instance: calls finished, programs started and finished there, hit rate,
        preemptions, pinned block-seconds, output tokens, and whether it was killed."""
        out = []
        for i, e in enumerate(self.engines):
            m = e.metrics
            out.append(
                {
                    "calls": float(m.calls_done),
                    "programs_started": float(len(m.program_start_s)),
                    "programs_finished": float(m.programs_done),
                    "hit_rate": m.hit_tokens / m.input_tokens if m.input_tokens else 0.0,
                    "preemptions": float(m.preemptions),
                    "pinned_block_s": m.pinned_block_s,
                    "output_tokens": float(m.output_tokens),
                    "killed": float(not self.alive[i]),
                }
            )
        return out
