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

import ttlpolicy

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


# -- the return queue and evictions (report fields the library decides with) ----------------

#: A call of 1000 tokens (4000 characters; ``identity.CHARS_PER_TOKEN``): 63 blocks of 16.
BIG = "x" * 4000
BIG_TOKENS, BIG_BLOCKS = 1000, 63


def library(
    router: TTLPolicyRouter,
    reports: dict[str, dict[str, Any]],
    program: str,
    before: list[tuple[str, str]] = (),  # type: ignore[assignment]
    pins: list[tuple[str, str, int]] = (),  # type: ignore[assignment]
    evicted: list[tuple[str, str, int]] = (),  # type: ignore[assignment]
) -> str:
    """What a fresh ``ttlpolicy.ProgramRouter`` with the adapter's policy answers for a
    ``BIG`` call of ``program``: instances registered in ``reports``' order, calls
    ``before`` ((program, where it must go)) routed on their first reports, then ``reports``
    applied, with ``evicted`` ((instance, program, held)) and ``pins`` ((instance,
    program, blocks), 30 s left)."""
    ref = ttlpolicy.ProgramRouter(ttlpolicy.TTLPolicy(router._config))
    figures = {"free_blocks": 100, "total_blocks": 100, "queue_len": 0, "queued_tokens": 0}
    for iid in reports:
        ref.add_instance(iid)
        ref.report(iid, **figures, working_set_blocks=0, cached_fraction=0.0)
    for pid, where in before:
        assert ref.route(pid, 0.0, BIG_BLOCKS, BIG_TOKENS) == where
    for iid, rep in reports.items():
        ref.report(iid, **rep)
    for iid, pid, held in evicted:
        ref.evicted(iid, pid, held)
    for iid, pid, blocks in pins:
        ref.pinned(iid, pid, 31.0, blocks)
    return ref.route(program, 1.0, BIG_BLOCKS, BIG_TOKENS)


#: A replica busy with new programs' calls (10 of 1000 tokens: 1.1 s of prefill under the
#: default miss model, more than a 1000-token miss) but no returning call.
BUSY_WITH_NEW = {
    "free_blocks": 100,
    "total_blocks": 100,
    "queue_len": 10,
    "queued_tokens": 10_000,
    "return_queue_len": 0,
    "return_queued_tokens": 0,
    "working_set_blocks": 0,
    "cached_fraction": 0.0,
}
IDLE = {**BUSY_WITH_NEW, "queue_len": 0, "queued_tokens": 0}
WHOLE_QUEUE = {k: v for k, v in BUSY_WITH_NEW.items() if not k.startswith("return_")}


def test_return_queue_keeps_a_pinned_program_home() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(pins=[("p", 30.0, BIG_BLOCKS)], **BUSY_WITH_NEW)
    got = choose(router, [a, b], body("p", prompt=BIG))[0]
    # the library's answer with the return queue, which differs from its answer without it
    # (so the adapter must pass the fields for the call to stay)
    pinned = [("b", "p", BIG_BLOCKS)]
    want = library(router, {"a": IDLE, "b": BUSY_WITH_NEW}, "p", pins=pinned)
    without = library(router, {"a": IDLE, "b": WHOLE_QUEUE}, "p", pins=pinned)
    assert (want, without) == ("b", "a")
    assert got == [want]
    assert router.counters["reports"] == 2 and router.counters["pins"] == 1


def test_eviction_frees_the_program_to_move() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(**IDLE)
    home = choose(router, [a, b], body("p", prompt=BIG))[0][0]
    other = b if home == "a" else a
    at_home = a if home == "a" else b
    # its home is now busy with new programs' calls, and reports p's context evicted
    at_home.report(evicted=[("p", 0)], **BUSY_WITH_NEW)
    other.report(**IDLE)
    got = choose(router, [a, b], body("p", prompt=BIG))[0]
    reports = {"a": IDLE, "b": IDLE}
    reports[home] = BUSY_WITH_NEW
    before = [("p", home)]
    want = library(router, reports, "p", before, evicted=[(home, "p", 0)])
    kept = library(router, reports, "p", before)
    assert (want, kept) == (other.replica_id.unique_id, home)
    assert got == [want]
    assert router.counters["evicted"] == 1 and router.counters["evicted_ignored"] == 0


def test_eviction_holding_most_of_the_context_keeps_the_program() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(**IDLE)
    home = choose(router, [a, b], body("p", prompt=BIG))[0][0]
    at_home = a if home == "a" else b
    at_home.report(evicted=[("p", BIG_BLOCKS - 1)], **BUSY_WITH_NEW)
    (b if home == "a" else a).report(**IDLE)
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == [home]
    assert router.counters["evicted_unchanged"] == 1 and router.counters["evicted"] == 0


def test_bad_evictions_are_ignored_and_the_rest_applied() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(**IDLE)
    home = choose(router, [a, b], body("p", prompt=BIG))[0][0]
    at_home = a if home == "a" else b
    at_home.report(**BUSY_WITH_NEW)
    at_home.routing_stats["ttlpolicy"]["evicted"] = [
        ["y" * 5000, 0],  # over ProgramRouter's 1024-byte bound
        ["n", math.nan],
        ["neg", -1],
        ["short"],
        "garbage",
        [3, 0],
        ["p", 0],
    ]
    assert choose(router, [a, b], body("p", prompt=BIG))[0] != [home]
    assert router.counters["evicted_ignored"] == 6
    assert router.counters["evicted"] == 1
    assert router.counters["reports_ignored"] == 0


def test_stale_eviction_of_a_program_routed_since_is_ignored() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(**IDLE)
    home = choose(router, [a, b], body("p", prompt=BIG))[0][0]
    at_home = a if home == "a" else b
    # taken before that call: the eviction it lists predates it (the call rebuilds it)
    at_home.report(evicted=[("p", 0)], at=time.time() - 60.0, **BUSY_WITH_NEW)
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == [home]
    assert router.counters["evicted_ignored"] == 1 and router.counters["evicted"] == 0
    assert router.program_router.home("p") == home


@pytest.mark.parametrize(
    "figures",
    [
        {"return_queue_len": 0},  # without return_queued_tokens
        {"return_queued_tokens": 0},  # without return_queue_len
        {"return_queue_len": 2, "return_queued_tokens": 0},  # longer than the queue (0)
        {"return_queue_len": -1, "return_queued_tokens": 0},
        {"return_queue_len": 0, "return_queued_tokens": math.nan},
    ],
)
def test_bad_return_queue_ignores_the_report(figures: dict[str, Any]) -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report(pins=[("p", 30.0, 25)], **figures)
    assert choose(router, [a, b], body("p")) == [["a"], ["b"]]
    assert router.counters["reports_ignored"] == 1


def test_two_routers_agree_through_the_pin_in_the_replicas_report_file(tmp_path: Any) -> None:
    # Two handles (two ingress replicas) keep two routers. The program's first call went
    # through the first; its replica's report, carried through the engine's report file as
    # from vLLM's engine-core process, names the pin, so the second router, which never saw
    # the program, sends its return there too, past a small queue (without the pin it goes,
    # as a new program, to the idle replica: the control).
    from ttlpolicy_ray import read_report, report_path, write_report

    first = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report()
    home_id = choose(first, [a, b], body("p"))[0][0]
    home, other = (a, b) if home_id == "a" else (b, a)
    busy = {"queue_len": 1, "queued_tokens": 16}
    other.report()
    home.report(**busy)
    assert choose(make_router(), [a, b], body("p"))[0] == [other.replica_id.unique_id]
    path = report_path(tmp_path, 4242)
    write_report(path, routing_stats(
        seq=home.seq + 1, pins=[("p", 30.0, 25)], free_blocks=75, total_blocks=100,
        working_set_blocks=25, cached_fraction=0.0, block_size=16, **busy,
    ))  # fmt: skip
    home.routing_stats = read_report(path)
    second = make_router()
    assert choose(second, [a, b], body("p"))[0] == [home_id]
    assert second.counters["pins"] == 1
