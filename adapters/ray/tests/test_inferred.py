"""Programs without ids at the router (``infer_programs``), with Ray's own ``PendingRequest``,
``RequestMetadata`` and Ray Serve LLM's ``RawRequestInfo`` (the headers its ingress passes to
the model deployment): a chat session's calls that name nothing stay on the replica their
first call went to, where the same calls without inference are spread by load; a copy of a
session's messages from another tenant links to nothing of that tenant; the session an agent
client names in its headers is the program, tenant-scoped."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray")
from ray.llm._internal.serve.core.protocol import RawRequestInfo
from ray.serve._private.common import DeploymentHandleSource, RequestMetadata
from ray.serve.request_router import PendingRequest
from test_router import DEPLOYMENT, Replica
from ttlpolicy_ray.inference import TEXT_CHUNK_BYTES, prompt_bytes
from ttlpolicy_ray.router import TTLPolicyRouter

from ttlpolicy.agent_headers import from_fields
from ttlpolicy.ids import program_key, tenant_key

#: Replicas whose reports say most returning calls find their context (the router then
#: keeps a program home unless elsewhere is cheaper by more than a lost context).
HELD = {"cached_fraction": 0.9, "free_blocks": 1000, "total_blocks": 1000}


def make_router(infer: bool) -> TTLPolicyRouter:
    r = TTLPolicyRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    r.initialize_state(infer_programs=infer)
    return r


def route(
    router: TTLPolicyRouter,
    replicas: list[Replica],
    body: Any,
    headers: dict | None = None,
    session: str = "",
) -> str:
    """The replica Ray tries first for ``body`` (with Ray Serve LLM's ``RawRequestInfo``, and
    Ray's session id)."""

    async def go() -> str:
        args: list[Any] = [body]
        if headers is not None:
            args.append(RawRequestInfo(headers=headers))
        metadata = RequestMetadata(
            request_id="r", internal_request_id=f"i{time.monotonic_ns()}", session_id=session
        )
        pending = PendingRequest(args=args, kwargs={}, metadata=metadata)
        ranks = await router.choose_replicas(replicas, pending)  # type: ignore[arg-type]
        return ranks[0][0].replica_id.unique_id

    return asyncio.run(go())


def chat(session: int, turns: int, **extra: Any) -> dict[str, Any]:
    """A chat body: a system prompt, then ``turns`` rounds of user or tool text and answers
    (each round appended to the last: what an agent resends)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. " * 40}]
    messages.append({"role": "user", "content": f"Task {session}: " + "fix the bug. " * 40})
    for t in range(turns):
        messages.append({"role": "assistant", "content": f"Call {t} of {session}. " * 20})
        messages.append({"role": "tool", "content": [{"type": "text", "text": f"out {t} " * 60}]})
    return {"messages": messages, "max_tokens": 64, **extra}


def sessions_routes(router: TTLPolicyRouter) -> list[list[str]]:
    """Three sessions, four calls each: the first calls at once (the router spreads them by
    the calls it sent), then each later call alone (the replicas report idle between calls:
    nothing favours either but where the session's context is)."""
    a, b = Replica("a"), Replica("b")
    for r in (a, b):
        r.report(**HELD)
    routes = [[route(router, [a, b], chat(s, 0))] for s in range(3)]
    for turn in range(1, 4):
        for k in range(3):
            s = (k + turn) % 3  # (an order that turns each round)
            for r in (a, b):
                r.report(**HELD)
            routes[s].append(route(router, [a, b], chat(s, turn)))
    return routes


def test_a_sessions_calls_stay_on_one_replica() -> None:
    router = make_router(infer=True)
    routes = sessions_routes(router)
    assert all(len(set(r)) == 1 for r in routes), routes  # each session stays home
    assert len({r[0] for r in routes}) == 2, routes  # the sessions were spread
    c = router.counters
    assert (c["calls_linked"], c["calls_new_program"], c["calls_forked"]) == (9, 3, 0)
    assert c["anonymous"] == 0


def test_without_inference_the_same_calls_move() -> None:
    router = make_router(infer=False)
    routes = sessions_routes(router)
    assert any(len(set(r)) > 1 for r in routes), routes
    assert router.counters["anonymous"] == 12 and router.counters["calls_linked"] == 0


def test_the_flag_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLPOLICY_INFER_PROGRAMS", "1")
    assert make_router_default().inferred is not None
    monkeypatch.setenv("TTLPOLICY_INFER_PROGRAMS", "0")
    assert make_router_default().inferred is None


def make_router_default() -> TTLPolicyRouter:
    r = TTLPolicyRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    r.initialize_state()
    return r


@pytest.mark.parametrize("stranger", [{"cache_salt": "salt-b"}, {}], ids=["other", "none"])
def test_a_copy_from_another_tenant_links_to_nothing_of_it(stranger: dict[str, Any]) -> None:
    router = make_router(infer=True)
    a, b = Replica("a"), Replica("b")
    for r in (a, b):
        r.report(**HELD)
    route(router, [a, b], chat(0, 0, cache_salt="salt-a"))
    route(router, [a, b], chat(0, 1, **stranger))  # the owner's next call, copied
    assert router.counters["calls_new_program"] == 2 and router.counters["calls_linked"] == 0
    route(router, [a, b], chat(0, 1, cache_salt="salt-a"))
    assert router.counters["calls_linked"] == 1  # the owner's own call still links


def test_session_headers_name_the_program_per_tenant() -> None:
    router = make_router(infer=True)
    a, b = Replica("a"), Replica("b")
    a.report(**HELD)
    b.report(pins=[("s1", 30.0, 25)], **{**HELD, "free_blocks": 975})
    claude = {"X-Claude-Code-Session-Id": "s1"}
    assert route(router, [a, b], chat(0, 1), headers=claude) == "b"  # its pin
    # another tenant's same header is another program: not the owner's pin
    assert route(router, [a, b], chat(0, 1, cache_salt="salt-b"), headers=claude) == "a"
    # a sub-agent is a program of its own; prompt_cache_key names one too
    sub = {**claude, "x-claude-code-agent-id": "x"}
    route(router, [a, b], chat(1, 0), headers=sub)
    route(router, [a, b], chat(2, 0, prompt_cache_key="k"))
    known = {program_key(tenant_key("salt-b"), "s1"), "s1/agent:x", "k", "s1"}
    assert all(router.program_router.home(pid) is not None for pid in known)
    assert router.counters["calls_new_program"] == 0  # none of them was inferred


def test_prompt_bytes_extend_from_call_to_call() -> None:
    """The string hashed for a call begins with the previous call's: the linker's premise."""
    for turn in range(3):
        before, after = prompt_bytes(chat(0, turn)), prompt_bytes(chat(0, turn + 1))
        assert after.startswith(before) and len(after) - len(before) >= TEXT_CHUNK_BYTES
    assert prompt_bytes({"prompt": [1, 2]}) == (1).to_bytes(8, "little") + (2).to_bytes(8, "little")
    assert prompt_bytes({"prompt": [1 << 70]}) == b""
    assert prompt_bytes({"messages": "not a list"}) == b""


def test_an_engines_inferred_program_is_not_the_routers() -> None:
    """A replica's engine infers programs too, under keys its own linker makes: its pin of
    ``\\x00linked:1`` is not the router's first inferred program, and is ignored."""
    router = make_router(infer=True)
    a, b = Replica("a"), Replica("b")
    for r in (a, b):
        r.report(**HELD)
    home = route(router, [a, b], chat(0, 0))
    other = b if home == "a" else a
    home_replica = a if home == "a" else b
    home_replica.report(**HELD)
    other.report(pins=[("\x00linked:1", 30.0, 25)], **{**HELD, "free_blocks": 975})
    assert route(router, [a, b], chat(0, 1)) == home
    assert router.counters["pins"] == 0 and router.counters["pins_ignored"] == 1


CLAUDE = {"X-Claude-Code-Session-Id": "s1"}


@pytest.mark.parametrize(
    ("headers", "session", "carried"),
    [
        (CLAUDE, "", {"ttlpolicy_session": "s1"}),
        ({**CLAUDE, "x-claude-code-agent-id": "x"}, "", {"ttlpolicy_session": "s1",
                                                         "ttlpolicy_agent": "x"}),
        (None, "ray-session", {"ttlpolicy_session": "ray-session"}),  # Ray's x-session-id
        (None, "y" * 200, None),  # a program id the engine's session field would refuse
        (None, "", None),  # no session: nothing to carry (inferred at the router)
    ],
)  # fmt: skip
def test_the_session_is_carried_to_the_engine(headers, session, carried) -> None:
    """Headers reach the router, not the engine: the router carries the session into the
    body's ``vllm_xargs``, where the vLLM adapter reads the same program from it."""
    router = make_router(infer=True)
    a, b = Replica("a"), Replica("b")
    for r in (a, b):
        r.report(**HELD)
    for body in ({"prompt": "x" * 400, "vllm_xargs": None}, SimpleNamespace(prompt="x" * 400)):
        route(router, [a, b], body, headers=headers, session=session)
        xargs = body["vllm_xargs"] if isinstance(body, dict) else getattr(body, "vllm_xargs", None)
        assert xargs == carried
        if carried is not None:
            read = from_fields(xargs)
            assert read is not None and router.program_router.home(read.program_id) is not None


@pytest.mark.parametrize(
    "xargs", [{"program_id": "p"}, {"ttlpolicy_session": "own"}, {"ttlpolicy_agent": "a"}]
)
def test_fields_the_client_set_are_never_overwritten(xargs) -> None:
    router = make_router(infer=False)
    a = Replica("a")
    a.report(**HELD)
    body = {"prompt": "x" * 400, "vllm_xargs": dict(xargs)}
    route(router, [a], body, headers=CLAUDE)
    assert body["vllm_xargs"] == xargs and router.counters["sessions_carried"] == 0
