"""``TTLPolicyRouter`` against hostile replicas and clients (issue 44), without a cluster (as
``test_router.py``): replicas that come and go keep every other program's home; a policy
whose miss cost is inf does not route by scan order; a report's block size is its own and
bounded; its pins are capped and checked (no claim on a program routed elsewhere, none
expired); a tenant's ``last_turn`` ends its own program only; calls naming no program take
no program's place in a full table; a prompt is read no further than the bytes hashed."""

from __future__ import annotations

import time
import tracemalloc
from array import array
from typing import Any

import pytest

pytest.importorskip("ray")
from ray.serve._private.common import DeploymentHandleSource
from test_router import BIG, DEPLOYMENT, IDLE, Replica, body, choose, make_router
from ttlpolicy_ray import inference
from ttlpolicy_ray.identity import _field, program_key, tenant_key
from ttlpolicy_ray.inference import MAX_HASHED_BYTES, prompt_bytes
from ttlpolicy_ray.router import MAX_BLOCK_SIZE, MAX_REPORT_PINS, TTLPolicyRouter

from ttlpolicy.ids import program_info


def router_with(**kwargs: Any) -> TTLPolicyRouter:
    r = TTLPolicyRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    r.initialize_state(**kwargs)
    return r


def test_replicas_that_come_and_go_keep_the_others_programs() -> None:
    """The table holds 2; 50 replicas come and go beside a live one.  Each is removed from the
    library's table when Ray reports it dead (``update_replicas`` dropping it takes the same
    path, ``_remove``), so none fills it: the live replica's program keeps
    its home (the old adapter rebuilt the router when the table filled, losing it), and the
    removed ids remembered stay within their bound."""
    router = router_with(max_instances=2)
    router._max_gone = 5  # (MAX_GONE_REPLICAS, made small)
    live = Replica("live")
    live.report()
    assert choose(router, [live], body("p")) == [["live"]]
    for k in range(50):
        r = Replica(f"r{k}")
        r.report()
        choose(router, [live, r], body(f"q{k}"))  # registered when first seen
        assert router.program_router.instance_ids == ["live", f"r{k}"]
        router.on_replica_actor_died(r.replica_id)
    assert router.program_router.instance_ids == ["live"]
    assert router.program_router.home("p") == "live"
    assert list(router._gone) == [f"r{k}" for k in range(45, 50)]
    assert router.counters["drained"] == 50 and router.counters["instances_refused"] == 0
    # a third live replica over max_instances is counted, not registered; Ray still ranks it
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report()
    ranks = choose(router, [live, a, b], body("p"))
    assert router.counters["instances_refused"] >= 1
    assert sorted(x for rank in ranks for x in rank) == ["a", "b", "live"]


def test_a_miss_cost_of_inf_does_not_route_by_scan_order() -> None:
    """``prefill_s_per_token2=1e300`` (an accepted config): rebuilding a 1000-token context
    costs inf; at a home finding every prefix cached the cost was NaN and the first replica
    scanned won.  The program stays home."""
    router = router_with(policy='{"prefill_s_per_token2": 1e300}')
    a, b = Replica("a"), Replica("b")
    cached = {**IDLE, "cached_fraction": 1.0}
    a.report(**cached)
    b.report(pins=[("p", 0.5, 10)], **cached)
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == ["b"]
    time.sleep(0.6)  # its pin expires: the home's cost is 0 · inf
    a.report(**cached)
    b.report(**cached)
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == ["b"]


@pytest.mark.parametrize("block_size", [None, 0, -16, True, 16.0, "16", MAX_BLOCK_SIZE + 1])
def test_a_bad_block_size_ignores_the_report(block_size: Any) -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report(pins=[("p", 30.0, 25)], block_size=block_size)
    assert choose(router, [a, b], body("p")) == [["a"], ["b"]]
    assert router.counters["reports_ignored"] == 1 and router.counters["pins"] == 0


def test_a_replicas_block_size_is_its_own() -> None:
    """``a`` (16-token blocks) has 50 of 100 free; ``b`` (64-token blocks) 20 of 25: 1280
    tokens free, room for the 1000-token call that ``a`` lacks.  Converted to the router's
    block, ``b`` fits and gets it; read raw (or with ``b``'s size applied to all, as before),
    ``a`` would."""
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(free_blocks=50, total_blocks=100, working_set_blocks=50, block_size=16)
    b.report(free_blocks=20, total_blocks=25, working_set_blocks=0, block_size=64)
    assert choose(router, [a, b], body("n", prompt=BIG))[0] == ["b"]
    # the other order of reports: the same answer (no report's size applies to another)
    router = make_router()
    b.report(free_blocks=20, total_blocks=25, working_set_blocks=0, block_size=64)
    a.report(free_blocks=50, total_blocks=100, working_set_blocks=50, block_size=16)
    assert choose(router, [b, a], body("n", prompt=BIG))[0] == ["b"]


def test_a_report_of_100k_invented_pins_is_capped() -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    invented = [(f"x{k}", 30.0, 1) for k in range(100_000)]
    b.report(pins=invented, max_pins=len(invented))
    choose(router, [a, b], body("p"))
    assert router.counters["pins"] == MAX_REPORT_PINS
    assert router.counters["pins_over_cap"] == 100_000 - MAX_REPORT_PINS
    assert router.program_router.program_count <= MAX_REPORT_PINS + 1


def test_a_replica_cannot_claim_a_program_routed_elsewhere() -> None:
    """``p``'s home finds every prefix cached and is idle; the other replica claims ``p``'s
    pin.  Accepted, the claim would make it ``p``'s home with a live pin, and ``p`` would go
    there; refused, ``p`` stays."""
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(**IDLE)
    home = choose(router, [a, b], body("p", prompt=BIG))[0][0]
    at_home, other = (a, b) if home == "a" else (b, a)
    at_home.report(**{**IDLE, "cached_fraction": 1.0})
    other.report(pins=[("p", 30.0, 63)], **IDLE)
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == [home]
    assert router.counters["pins_refused"] == 1 and router.counters["pins"] == 0


def test_an_expired_pin_sets_no_home() -> None:
    """A pin with 1 s left in a report taken 5 s ago has expired: refused, ``p`` routes as
    new (to the idle replica, not to the busier one that claimed it)."""
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report(**IDLE)
    b.report(pins=[("p", 1.0, 63)], at=time.time() - 5.0, **{**IDLE, "queue_len": 1,
             "queued_tokens": 100, "return_queue_len": 0, "return_queued_tokens": 0})  # fmt: skip
    assert router.program_router.home("p") is None
    assert choose(router, [a, b], body("p", prompt=BIG))[0] == ["a"]
    assert router.counters["pins_refused"] == 1


@pytest.mark.parametrize("attacker_salt", [None, "other-salt"])
def test_a_last_turn_of_another_tenant_ends_another_program(attacker_salt: Any) -> None:
    router = make_router()
    a, b = Replica("a"), Replica("b")
    a.report()
    b.report()
    owner = body("p", cache_salt="owner-salt")
    choose(router, [a, b], owner)
    key = program_key(tenant_key("owner-salt"), "p")
    assert router.program_router.home(key) is not None
    attack = body(None, cache_salt=attacker_salt)
    attack["vllm_xargs"] = {"program_id": "p", "last_turn": True}
    choose(router, [a, b], attack)
    assert router.program_router.home(key) is not None  # still the owner's
    owner["vllm_xargs"]["last_turn"] = True
    choose(router, [a, b], owner)
    assert router.program_router.home(key) is None  # its owner ended it


def test_a_tenant_field_set_by_the_gateway_replaces_the_salt() -> None:
    """``tenant_field="tenant"``: the tenant is ``vllm_xargs["tenant"]`` (which the operator's
    gateway sets), and ``cache_salt`` no longer tells tenants apart."""
    router = router_with(tenant_field="tenant")
    a = Replica("a")
    a.report()

    def call(tenant: str, salt: str, last_turn: bool = False) -> None:
        xargs = {"program_id": "p", "tenant": tenant, "last_turn": last_turn}
        choose(router, [a], body(None, cache_salt=salt, vllm_xargs=xargs))

    call("t1", "s1")
    call("t2", "s1", last_turn=True)  # same salt, another tenant: another program
    assert router.program_router.program_count == 1
    call("t1", "s2", last_turn=True)  # another salt, the same tenant: its program
    assert router.program_router.program_count == 0
    for bad in [3, "", "f" * 65]:
        with pytest.raises(ValueError, match="tenant_field"):
            router_with(tenant_field=bad)


@pytest.mark.parametrize("value", [None, ""])
def test_no_tenant_keys_a_program_by_its_id(value: Any) -> None:
    assert tenant_key(value) is None
    assert program_key(None, "p") == "p"


def test_program_keys_do_not_collide() -> None:
    tenants = [tenant_key(v) for v in ("s1", "s2", 3, b"s1")]
    assert all(t is not None and len(t) == 32 for t in tenants)
    t1 = tenants[0]
    # a client id holds no control character: the keys' namespace cannot be forged
    assert program_info("\x00p") is None and program_info(f"\x00t:{t1}:p") is None
    ids = ["p", "t:p", f"t:{t1}:p", "x" * 256, "\U0001f600" * 256]
    keys = [program_key(t, pid) for t in (None, *tenants) for pid in ids]
    assert len(set(keys)) == len(keys)
    assert all(0 < len(k.encode("utf-8")) <= 1024 for k in keys)


def _prompt_bytes_unbounded(body: Any, cap: int) -> bytes:
    """``prompt_bytes`` as it was: all the text joined and encoded, then cut (the answer a
    bounded reading must keep, so that no call routes otherwise)."""
    prompt = _field(body, "prompt")
    if isinstance(prompt, list | tuple) and prompt and all(type(t) is int for t in prompt):
        return array("q", prompt[: cap // 8]).tobytes()
    out: list[str] = []

    def text(value: Any, depth: int = 0) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list | tuple) and depth < 4:
            for part in value:
                text(_field(part, "text") if not isinstance(part, str) else part, depth + 1)

    if prompt is not None:
        text(prompt)
    else:
        messages = _field(body, "messages")
        for message in messages if isinstance(messages, list | tuple) else ():
            role = _field(message, "role")
            out.append(role if isinstance(role, str) else "")
            out.append("\x1f")
            text(_field(message, "content"))
            out.append("\x1e")
    return "".join(out).encode("utf-8", "surrogatepass")[:cap]


# (multi-byte characters, so that the cap falls inside one: 2, 3 and 4 bytes, and a lone
# surrogate, passed as 3)
TEXTS = ["a\u00e9b", "\u20ac\u20acx", "\U0001f600y\U0001f600", "z\ud800z", ""]
BODIES: list[Any] = [
    {"prompt": "".join(TEXTS)},
    {"prompt": TEXTS},
    {"prompt": [1, 2, 3]},
    {"messages": [{"role": "user", "content": t} for t in TEXTS]},
    {"messages": [{"role": 3, "content": [{"text": t}, t, {"image": "x"}]} for t in TEXTS]},
    {"messages": [{"role": "system"}, {"content": [[["\u00e9" * 3, ["deep"]]]]}]},
    {"messages": "not a list"},
    None,
]


def test_prompt_bytes_are_the_first_bytes_of_the_whole_prompt(monkeypatch: Any) -> None:
    """Under the cap the bytes are the whole prompt's; over it, its first ``cap`` bytes (a
    character the cap cuts is cut as before): the same hashes, the same routes."""
    small = {"messages": [{"role": "user", "content": "h\u00e9llo"}]}
    assert prompt_bytes(small) == b"user\x1fh\xc3\xa9llo\x1e"
    for request in BODIES:
        assert prompt_bytes(request) == _prompt_bytes_unbounded(request, MAX_HASHED_BYTES)
    for cap in range(0, 70):
        monkeypatch.setattr(inference, "MAX_HASHED_BYTES", cap)
        for request in BODIES:
            assert prompt_bytes(request) == _prompt_bytes_unbounded(request, cap), (cap, request)


class _Unread:
    """Text past the cap: reading it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"read past the cap ({name})")


def test_a_prompt_is_not_read_past_the_cap() -> None:
    """What follows ``MAX_HASHED_BYTES`` of text is not read (the old reading joined and
    encoded all of it: 4 x 64 MB took 316 ms and 384 MiB on the router's event loop)."""
    full = "\u00e9" * (MAX_HASHED_BYTES // 2)  # (2 bytes a character: exactly the cap)
    messages = [{"role": "user", "content": full}, _Unread()]
    assert len(prompt_bytes({"messages": messages})) == MAX_HASHED_BYTES
    parts = [{"role": "user", "content": [{"text": full}, _Unread()]}]
    assert len(prompt_bytes({"messages": parts})) == MAX_HASHED_BYTES
    # one long text: only the characters within the cap are copied and encoded
    text = "x" * (4 * MAX_HASHED_BYTES)
    messages = [{"role": "user", "content": text}] * 2
    tracemalloc.start()
    try:
        got = prompt_bytes({"messages": messages})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == b"user\x1f" + b"x" * (MAX_HASHED_BYTES - 5)
    assert peak < 4 * MAX_HASHED_BYTES  # (all of it: 16 x the cap, joined then encoded)
