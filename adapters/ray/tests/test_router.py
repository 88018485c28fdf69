"""``TTLPolicyRouter`` without a cluster: Ray's own ``PendingRequest`` and ``RequestMetadata``,
replicas as the two fields the router reads (``replica_id``, ``routing_stats``).  Bad input
never crashes the router nor loses the call."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

pytest.importorskip("ray")
from ray.serve._private.common import (
    DeploymentHandleSource,
    DeploymentID,
    RequestMetadata,
)
from ray.serve.request_router import PendingRequest, ReplicaID
from ttlpolicy_ray import routing_stats
from ttlpolicy_ray.router import TTLPolicyRouter

DEPLOYMENT = DeploymentID(name="d", app_name="a")


class Replica:
    def __init__(self, uid: str) -> None:
        self.replica_id = ReplicaID(unique_id=uid, deployment_id=DEPLOYMENT)
        self.routing_stats: dict[str, Any] = {}
        self.seq = 0

    def report(self, pins: list[tuple[str, float, int]] = (), **figures: Any) -> None:  # type: ignore[assignment]
        self.seq += 1
        fields = {
            "free_blocks": 100,
            "total_blocks": 100,
            "queue_len": 0,
            "queued_tokens": 0,
            "working_set_blocks": 0,
            "cached_fraction": 0.0,
            "block_size": 16,
        }
        fields.update(figures)
        self.routing_stats = routing_stats(seq=self.seq, pins=pins, **fields)


def make_router() -> TTLPolicyRouter:
    r = TTLPolicyRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    r.initialize_state()
    return r


def choose(router: TTLPolicyRouter, replicas: list[Replica], body: Any, session: str = "") -> list:
    async def go() -> list:
        pending = PendingRequest(
            args=[body],
            kwargs={},
            metadata=RequestMetadata(
                request_id="r", internal_request_id=f"i{time.monotonic_ns()}", session_id=session
            ),
        )
        ranks = await router.choose_replicas(replicas, pending)  # type: ignore[arg-type]
        return [[r.replica_id.unique_id for r in rank] for rank in ranks]

    return asyncio.run(go())


def body(program: Any = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt": "x" * 400, **extra}
    if program is not None:
        out["vllm_xargs"] = {"program_id": program}
    return out


def test_no_report_yet_is_rays_choice() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    assert choose(router, [a, b], body("p")) == [["a", "b"]]
    assert router.counters["fallback"] == 1


def test_pin_decides_and_session_header_names_the_program() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report(pins=[("p", 30.0, 25)], free_blocks=75, working_set_blocks=25)
    assert choose(router, [a, b], body("p")) == [["b"], ["a"]]
    # Ray's session id (x-session-id) names the program when the body does not
    b.report(pins=[("s", 30.0, 25)], free_blocks=75, working_set_blocks=25)
    assert choose(router, [a, b], body(), session="s") == [["b"], ["a"]]
    assert router.counters["pins"] == 2


@pytest.mark.parametrize(
    "figures",
    [
        {"free_blocks": math.nan},
        {"free_blocks": -1},
        {"queue_len": -3},
        {"cached_fraction": math.inf},
        {"cached_fraction": 2.0},
        {"free_blocks": 200},  # > total
        {"queued_tokens": "many"},
    ],
)
def test_bad_report_is_ignored(figures: dict[str, Any]) -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report(pins=[("p", 30.0, 25)], **figures)
    # b's report is refused whole (its pin too): p routes as new, to a, the only one reported
    assert choose(router, [a, b], body("p")) == [["a"], ["b"]]
    assert router.counters["reports_ignored"] == 1
    assert router.counters["pins"] == 0


def test_wrong_version_and_garbage_stats_are_ignored() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report()
    b.routing_stats["ttlpolicy"]["v"] = 99
    assert choose(router, [a, b], body("p"))[0] == ["a"]
    b.routing_stats = {"ttlpolicy": "garbage"}
    assert choose(router, [a, b], body("q"))[0] == ["a"]
    assert router.counters["reports_ignored"] == 1


def test_report_from_a_dead_replica_is_ignored() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report(pins=[("p", 30.0, 25)])
    assert choose(router, [a, b], body("p"))[0] == ["b"]
    router.on_replica_actor_died(b.replica_id)
    b.report(pins=[("p", 30.0, 25)])  # a late report of the dead replica
    # Ray may still list it among the candidates for a moment: it gets no call
    assert choose(router, [a, b], body("p")) == [["a"], ["b"]]
    assert router.counters["drained"] == 1
    assert router.counters["reports_ignored"] == 1


def test_bad_pins_are_ignored_and_the_rest_applied() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    long_id = "y" * 5000  # over ProgramRouter's 1024-byte bound
    b.report()
    b.routing_stats["ttlpolicy"]["pins"] = [
        [long_id, 30.0, 5],
        ["n", math.nan, 5],
        ["neg", 30.0, -5],
        ["short"],
        "garbage",
        ["p", 30.0, 25],
    ]
    assert choose(router, [a, b], body("p"))[0] == ["b"]
    assert router.counters["pins_ignored"] == 5
    assert router.counters["pins"] == 1


@pytest.mark.parametrize("program", ["z" * 300, 3.5, "", ["list"]])
def test_bad_program_id_routes_as_anonymous(program: Any) -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report()
    ranks = choose(router, [a, b], body(program))
    assert sorted(r for rank in ranks for r in rank) == ["a", "b"] and len(ranks[0]) == 1
    assert router.counters["anonymous"] == 1
    assert router.program_router.program_count == 0  # forgotten at once


def test_stale_pin_of_a_program_routed_since_is_ignored() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(pins=[("p", 30.0, 25)], at=time.time() - 1.0)
    b.report()
    assert choose(router, [a, b], body("p"))[0] == ["a"]
    # a's next report was taken before that call: it still lists the pin the call consumed
    a.report(pins=[("p", 30.0, 25)], at=time.time() - 0.5, queue_len=1, queued_tokens=1000)
    assert choose(router, [a, b], body("p"))[0] == ["b"]  # no pin: the queue decides
    assert router.counters["pins_ignored"] == 1
