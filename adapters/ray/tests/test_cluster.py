"""``TTLPolicyRouter`` in a real local Ray Serve (Ray 2.60, ``ray.init(num_cpus=2)``) over two
replicas of the CPU stand-in (``standin.py``: real ttlpolicy pins and TTLs decided by the
library's policy, capped at ``MAX_TTL_S`` seconds, no model: the tests set a replica's backlog
and kill one; real vLLM replicas: ``test_vllm_serve.py``). The calls go through a
``DeploymentHandle`` from this process, so the router runs here (``live_routers``). Shown: (a)
a program's calls stay on the replica holding its pin; (b) it moves when its pin has expired
and its replica is busier, and when its replica is overloaded although its pin is live — but
not when only new programs' calls wait there (the return queue), until the replica reports its
context evicted; (c) a killed replica's programs are re-routed and finish, nothing hangs, and
no pin is left on the survivor once the programs ended.
One cluster for the module (Ray's start takes most of the time).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
import standin  # noqa: E402
from ray import serve  # noqa: E402
from serve_app import two_replicas  # noqa: E402
from standin import Board, StandIn  # noqa: E402
from ttlpolicy_ray import REPORT_KEY  # noqa: E402
from ttlpolicy_ray.router import TTLPolicyRouter, live_routers  # noqa: E402

pytestmark = pytest.mark.cluster

MAX_TTL_S = 3.0
CALL_TIMEOUT_S = 30.0
#: A returning call's prompt: 1000 tokens (its miss costs 0.11 s under the default miss model).
PROMPT = "x" * 4000


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    ray.cloudpickle.register_pickle_by_value(standin)  # the replicas cannot import tests/
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(proxy_location="Disabled")
        board = ray.remote(Board).options(name="ttlpolicy-board", num_cpus=0).remote()
        app = two_replicas(StandIn, board, max_ongoing_requests=32, max_ttl_s=MAX_TTL_S)
        handle = serve.run(app, name="ttl", route_prefix=None)
        yield {"handle": handle, "board": board}
    finally:
        serve.shutdown()
        ray.shutdown()


def call(cluster: dict[str, Any], program: str, last: bool = False, **extra: Any) -> dict:
    body = {"prompt": PROMPT, "vllm_xargs": {"program_id": program, "last_turn": last}, **extra}
    return cluster["handle"].remote(body).result(timeout_s=CALL_TIMEOUT_S)


def router() -> TTLPolicyRouter:
    (r,) = live_routers()
    return r


def fresh_reports(cluster: dict[str, Any], n: int = 2, timeout_s: float = 20.0) -> None:
    """Waits until the router sees a report from ``n`` replicas taken after now, and the
    board a state from each."""
    mark = time.time()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = [
            r.routing_stats.get(REPORT_KEY, {}).get("at", 0.0)
            for r in router().curr_replicas.values()
        ]
        states = ray.get(cluster["board"].get_states.remote())
        fresh_states = [s for s in states.values() if s["at"] > mark]
        if sum(at > mark for at in seen) >= n and len(fresh_states) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no fresh report from {n} replicas in {timeout_s} s")


def live_states(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    ids = {r.unique_id for r in router().curr_replicas}
    states = ray.get(cluster["board"].get_states.remote())
    return {k: v for k, v in states.items() if k in ids}


def set_backlog(
    cluster: dict[str, Any], replica: str, calls: int, tokens: int, *returns: int
) -> None:
    """``calls`` (``tokens``) added to the replica's queue; ``returns``: how many of them,
    and their tokens, are returning calls (default: all)."""
    ray.get(cluster["board"].set_backlog.remote(replica, calls, tokens, *returns))


def test_stays_with_its_pin_then_moves(cluster: dict[str, Any]) -> None:
    # the router exists and has both replicas' reports before the program's first call (a
    # call routed before any report is Ray's choice, counted as a fallback)
    if not live_routers():  # (the router is made at the handle's first call)
        cluster["handle"].remote({"prompt": "hi"}).result(timeout_s=CALL_TIMEOUT_S)
    fresh_reports(cluster)
    fallbacks = router().counters["fallback"]
    # a program's first call pins on a replica (the stand-in's policy pins it: miss 50 s)
    first = call(cluster, "p-stay")
    home = first["replica"]
    assert first["pin_s"] is not None and 0 < first["pin_s"] <= MAX_TTL_S
    fresh_reports(cluster)
    # another new program goes to the other replica: the most room
    other = call(cluster, "p-other", last=True)["replica"]
    assert other != home
    # (a) its returning calls stay where the pin is, and find it there
    for _ in range(3):
        fresh_reports(cluster)
        out = call(cluster, "p-stay")
        assert (out["replica"], out["hit"]) == (home, True)
    # a small backlog at home (one call of 500 tokens: 0.06 s < the 0.11 s a miss costs)
    # does not move a program whose pin is live ...
    fresh_reports(cluster)
    set_backlog(cluster, home, 1, 500)
    fresh_reports(cluster)
    out = call(cluster, "p-stay")
    assert (out["replica"], out["hit"]) == (home, True)
    # (b) ... but once the pin expired, the context is gone everywhere, and the less busy
    # replica wins
    time.sleep(MAX_TTL_S + 0.2)
    fresh_reports(cluster)
    assert "p-stay" not in live_states(cluster)[home]["pins"]
    out = call(cluster, "p-stay")
    assert (out["replica"], out["hit"]) == (other, False)
    moved = other
    # (b) overload: a live pin does not hold a program on a replica whose queue costs more
    # than a miss (10 calls of 1000 tokens: 1.1 s)
    fresh_reports(cluster)
    set_backlog(cluster, home, 0, 0)
    set_backlog(cluster, moved, 10, 10_000)
    fresh_reports(cluster)
    assert "p-stay" in live_states(cluster)[moved]["pins"]
    out = call(cluster, "p-stay", last=True)
    assert out["replica"] == home and not out["hit"]
    set_backlog(cluster, moved, 0, 0)
    assert router().counters["fallback"] == fallbacks


def test_behind_new_programs_it_stays_until_its_context_is_evicted(
    cluster: dict[str, Any],
) -> None:
    """The replicas report their return queue and their evicted contexts, and the router
    uses both: a program pinned at a replica busy with new programs' calls stays (its
    return runs ahead of them); once its pin expired the replica reports the context
    evicted and the program's next call goes, as a new program's, where no queue is."""
    if not live_routers():  # (run alone: the router is made at the handle's first call)
        cluster["handle"].remote({"prompt": "hi"}).result(timeout_s=CALL_TIMEOUT_S)
    fresh_reports(cluster)
    fallbacks = router().counters["fallback"]
    home = call(cluster, "p-ret")["replica"]
    (other,) = set(live_states(cluster)) - {home}
    # 10 new programs' calls of 1000 tokens wait at home (1.1 s of prefill, > the 0.11 s a
    # miss costs): a new program would go elsewhere, but no returning call waits there
    set_backlog(cluster, home, 10, 10_000, 0, 0)
    fresh_reports(cluster)
    out = call(cluster, "p-ret")
    assert (out["replica"], out["hit"]) == (home, True)
    # its pin expires: the context is gone (the stand-in keeps none unpinned) and home says
    # so; without that, home would still win the tie with the idle replica (both a miss)
    time.sleep(MAX_TTL_S + 0.2)
    fresh_reports(cluster)
    assert "p-ret" not in live_states(cluster)[home]["pins"]
    freed = router().counters["evicted"]
    out = call(cluster, "p-ret", last=True)
    assert (out["replica"], out["hit"]) == (other, False)
    assert router().counters["evicted"] == freed + 1  # (applied when the router routed)
    set_backlog(cluster, home, 0, 0)
    assert router().counters["fallback"] == fallbacks


def test_killed_replica_programs_rerouted(cluster: dict[str, Any]) -> None:
    fresh_reports(cluster)
    programs = [f"k{i}" for i in range(6)]
    homes = {p: call(cluster, p)["replica"] for p in programs}
    assert len(set(homes.values())) == 2, homes  # spread over both (room)
    fresh_reports(cluster)
    victim = homes["k0"]
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA") and a["name"].endswith(victim)
    ]
    assert len(names) == 1, names
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    # every program's next call finishes (nothing hangs: CALL_TIMEOUT_S each), none on the
    # dead replica; the victim's programs moved, the survivor's stayed on their pins
    second = {p: call(cluster, p) for p in programs}
    assert all(out["replica"] != victim for out in second.values())
    survivor_programs = [p for p in programs if homes[p] != victim]
    assert all(second[p]["hit"] for p in survivor_programs)
    assert router().counters["drained"] >= 1
    # the programs end; then no pin is left on any live replica (a program's pin on a replica
    # it left lives until its TTL: MAX_TTL_S), nor any program in the router
    for p in programs:
        call(cluster, p, last=True)
    time.sleep(MAX_TTL_S + 0.2)
    fresh_reports(cluster, n=1)
    states = live_states(cluster)
    assert states and all(s["pins"] == [] for s in states.values()), states
    assert all(not p.startswith("k") for p in router_programs())


def router_programs() -> list[str]:
    r = router().program_router
    return [p for p in (f"k{i}" for i in range(6)) if r.home(p) is not None]


def test_bad_requests_are_served(cluster: dict[str, Any]) -> None:
    """Anonymous, over-long and malformed program ids: served (routed as one-call programs)."""
    before = router().counters["anonymous"]
    bodies: list[dict[str, Any]] = [
        {"prompt": "hi"},
        {"prompt": "hi", "vllm_xargs": {"program_id": "x" * 10_000}},
        {"prompt": "hi", "vllm_xargs": {"program_id": 3.5}},
        {"prompt": "hi", "vllm_xargs": "not a dict"},
    ]
    for body in bodies:
        out = cluster["handle"].remote(body).result(timeout_s=CALL_TIMEOUT_S)
        assert out["pin_s"] is None  # anonymous at the replica too: never pinned
    assert router().counters["anonymous"] - before == len(bodies)
