"""A CPU stand-in for an engine replica under Ray Serve: real ttlpolicy pins, no model.

The Ray venv's tests (``test_cluster.py``) use it where a test must set a replica's load or
kill it, without vLLM (real vLLM replicas under Ray Serve: ``test_vllm_serve.py``, in the
vLLM venv); it is a ``ttlpolicy.ProgramLifecycle`` over a ``ProgramScheduler`` whose library
``TTLPolicy`` decides each call's pin (``max_ttl_s`` caps the TTL; a call's ``miss_s`` is the
miss cost it reports at finish, so a large one makes the policy pin), on the replica's real
clock (``time.monotonic``).  A call "runs" for ``work_s`` seconds holding its blocks; a
returning call whose program holds a live pin here consumes it (``hit``).  It has no prefix
cache besides pins, so it reports ``cached_fraction`` 0: without a pin a context is gone,
and its reports list it in ``evicted`` (held 0) — a pin that expired, or a call that ended
unpinned — until a call of the program arrives (that call rebuilds it) or the program
ends.  Its queue is its running calls plus a backlog; the return queue, its running calls
plus the backlog's returning part.  The tests reach a given replica through ``Board``, a
named actor: each report, a replica reads the backlog the test set for it there (calls added
to its reported queue, and how many of them are returns: the tests' overload) and leaves its
state (pins, programs) there.  ``die`` kills the process as a crash
would.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

from ray import serve
from ttlpolicy_ray import RoutingStatsMixin, lifecycle_stats

import ttlpolicy
from ttlpolicy.ids import program_info

BLOCK_SIZE = 16
CHARS_PER_TOKEN = 4  # as the router's estimate (ttlpolicy_ray.identity)


def call_blocks(prompt: str) -> tuple[int, int]:
    """(tokens, blocks) of a call with this prompt."""
    tokens = -(-len(prompt) // CHARS_PER_TOKEN)
    return tokens, -(-tokens // BLOCK_SIZE)


class StandIn(RoutingStatsMixin):
    def __init__(self, board: Any, total_blocks: int = 512, max_ttl_s: float = 1.5) -> None:
        self.board = board
        policy = ttlpolicy.TTLPolicy(ttlpolicy.PolicyConfig(max_ttl_s=max_ttl_s))
        self.sched = ttlpolicy.ProgramScheduler(policy, total_blocks, total_blocks)
        self.life = ttlpolicy.ProgramLifecycle(self.sched)
        self.total_blocks = total_blocks
        self.clock = time.monotonic
        self.running_blocks = 0
        self.running_tokens = 0
        self.running = 0
        # (calls, tokens, returning calls, their tokens) added to the reported queue
        self.backlog = (0, 0, 0, 0)
        self.evicted: dict[str, int] = {}  # contexts dropped and not rebuilt
        self.ids = itertools.count()
        self.replica = serve.get_replica_context().replica_id.unique_id

    def _now(self) -> float:
        now = self.clock()
        for pin in self.life.expire(now):
            self.evicted[pin.program_id] = 0  # a real engine frees the pinned blocks here
        return now

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        xargs = body.get("vllm_xargs")
        xargs = xargs if isinstance(xargs, dict) else {}
        info = program_info(xargs.get("program_id"), xargs.get("last_turn", False))
        rid = f"r{next(self.ids)}"
        pid = info.program_id if info is not None else "\x00anonymous:" + rid
        tokens, blocks = call_blocks(body.get("prompt", ""))
        now = self._now()
        pin = self.life.arrive(rid, pid, now, blocks)
        self.evicted.pop(pid, None)  # this call rebuilds its context here
        while self.sched.pop(now) is not None:  # no capacity limit: every call starts
            pass
        self.life.admitted(rid)
        self.running += 1
        self.running_blocks += blocks
        self.running_tokens += tokens
        try:
            await asyncio.sleep(float(body.get("work_s", 0.02)))
        finally:
            self.running -= 1
            self.running_blocks -= blocks
            self.running_tokens -= tokens
        done = self._now()
        last = info is None or info.last_turn
        finished = self.life.finish(
            rid,
            done,
            blocks,
            tool="search",
            last_turn=last,
            cache_miss_cost_s=float(body.get("miss_s", 50.0)),
            prefix_tokens=tokens,
        )
        if finished.pin is None and not last:
            self.evicted[pid] = 0  # not pinned: its context is gone at once
        return {
            "replica": self.replica,
            "hit": pin is not None,
            "pin_s": None if finished.pin is None else finished.pin.deadline_s - done,
        }

    def ttlpolicy_routing_stats(self, seq: int) -> dict[str, Any]:
        now = self._now()
        used = min(self.total_blocks, self.sched.pinned_blocks + self.running_blocks)
        calls, tokens, returns, return_tokens = self.backlog
        evicted = list(self.evicted.items())
        return lifecycle_stats(
            self.sched,
            now,
            seq=seq,
            free_blocks=self.total_blocks - used,
            total_blocks=self.total_blocks,
            queue_len=self.running + calls,
            queued_tokens=self.running_tokens + tokens,
            return_queue_len=self.running + returns,
            return_queued_tokens=self.running_tokens + return_tokens,
            evicted=evicted,
            working_set_blocks=used,
            cached_fraction=0.0,
            block_size=BLOCK_SIZE,
        )

    async def record_routing_stats(self) -> dict[str, Any]:
        self.backlog = await self.board.backlog.remote(self.replica)
        await self.board.put_state.remote(self.replica, self.state())
        return RoutingStatsMixin.record_routing_stats(self)

    def state(self) -> dict[str, Any]:
        self._now()
        return {
            "replica": self.replica,
            "pins": sorted(p.program_id for p in self.sched.pins()),
            "programs": self.sched.program_count,
            "running": self.sched.running_count,
        }

    def die(self) -> None:
        os._exit(1)


class Board:
    """What the test sets for a replica (its backlog) and what each replica last said of
    itself (``StandIn.state``, with the wall time it said it)."""

    def __init__(self) -> None:
        self.backlogs: dict[str, tuple[int, int, int, int]] = {}
        self.states: dict[str, dict[str, Any]] = {}

    def backlog(self, replica: str) -> tuple[int, int, int, int]:
        return self.backlogs.get(replica, (0, 0, 0, 0))

    def set_backlog(
        self,
        replica: str,
        calls: int,
        tokens: int,
        returns: int | None = None,
        return_tokens: int | None = None,
    ) -> None:
        """``calls`` waiting (``tokens``), of which ``returns`` (``return_tokens``) are
        returning calls (default: all of them)."""
        self.backlogs[replica] = (
            calls,
            tokens,
            calls if returns is None else returns,
            tokens if return_tokens is None else return_tokens,
        )

    def put_state(self, replica: str, state: dict[str, Any]) -> None:
        self.states[replica] = {**state, "at": time.time()}

    def get_states(self) -> dict[str, dict[str, Any]]:
        return self.states
