"""``ttlpolicy.ids``: any client request id becomes an id both backends accept; a client's
program fields are bounded, and a malformed id makes the request anonymous."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy._validate import MAX_TOOL_NAME_CHARS
from ttlpolicy.ids import (
    MAX_ID_BYTES,
    MAX_PROGRAM_ID_CHARS,
    Tenancy,
    continuation_index,
    program_info,
    program_key,
    scheduler_id,
    tenant_key,
)


def test_valid_ids_are_kept_and_others_digested():
    assert scheduler_id("req-1") == "req-1"
    edge = "é" * (MAX_ID_BYTES // 2)  # exactly MAX_ID_BYTES bytes
    assert scheduler_id(edge) == edge
    for bad in ("", "r" * (MAX_ID_BYTES + 1), "a\ud800b"):
        assert scheduler_id(bad).startswith("\x00sha256:")
    assert scheduler_id("r" * 5000) != scheduler_id("r" * 5001)


@given(st.text(max_size=3000))
def test_every_id_is_accepted_by_the_scheduler(impl, request_id):
    sched = impl.ProgramScheduler(
        impl.TTLPolicy(PolicyConfig()), total_blocks=100, pin_budget_blocks=10
    )
    sched.arrive(scheduler_id(request_id), "prog", 0.0, 1)
    assert sched.pop(0.0) == scheduler_id(request_id)


def test_program_fields_from_a_client():
    assert program_info("p1", "True", "bash") == program_info("p1", True, "bash")
    info = program_info(7, 1, "")
    assert info is not None and info.program_id == "7" and info.last_turn and info.tool is None
    assert not program_info("p", "no").last_turn  # type: ignore[union-attr]
    for bad in (None, "", True, 1.5, "x" * (MAX_PROGRAM_ID_CHARS + 1), "a\ud800b", ["p"]):
        assert program_info(bad) is None


@given(st.text(min_size=1, max_size=10_000))
def test_any_tool_text_is_bounded_never_raises(tool):
    info = program_info("p", tool=tool)
    assert info is not None and info.tool is not None and len(info.tool) <= MAX_TOOL_NAME_CHARS


# -- tenancy: a program is its tenant's alone --------------------------------------------------


def test_client_ids_hold_no_control_character():
    # the library's own ids ("\x00t:...", "\x00anonymous:...") start with one
    for bad in ("\x00t:abc:p", "\x00anonymous:r1", "p\n", "a\tb"):
        assert program_info(bad) is None


def test_program_keys_are_namespaced_by_tenant():
    a, b = tenant_key("salt-a"), tenant_key("salt-b")
    assert a is not None and b is not None and a != b and len(a) == 32
    assert tenant_key(None) is None and tenant_key("") is None
    assert program_key(None, "p") == "p"  # one shared namespace without a tenant
    keys = {program_key(None, "p"), program_key(a, "p"), program_key(b, "p")}
    assert len(keys) == 3
    assert program_key(a, "p") == program_key(tenant_key("salt-a"), "p")  # stable


@given(st.text(max_size=300), st.text(min_size=1, max_size=MAX_PROGRAM_ID_CHARS))
def test_every_program_key_is_accepted_and_no_client_id_forges_one(tenant, program_id):
    info = program_info(program_id)
    key = program_key(tenant_key(tenant), program_id)
    assert 0 < len(key.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
    if tenant and info is not None:
        assert key != info.program_id  # a client id never names a tenant's program


def test_tenancy_reads_the_salt_or_the_trusted_field():
    salt = Tenancy()
    assert salt.tenant("s1", {"tenant": "x"}) == tenant_key("s1")
    gateway = Tenancy(tenant_field="tenant")
    assert gateway.tenant("s1", {"tenant": "x"}) == tenant_key("x")
    assert gateway.tenant("s1", None) is None  # no trusted field: no tenant
    info = program_info("p", True, "bash")
    scoped = salt.scoped(info, tenant_key("s1"))
    assert scoped is not None and scoped.program_id == program_key(tenant_key("s1"), "p")
    assert scoped.last_turn and scoped.tool == "bash"
    assert Tenancy(client_ids=False).scoped(info, None) is None
    assert salt.scoped(None, tenant_key("s1")) is None


def test_bad_tenancy_knobs_name_the_knob(monkeypatch):
    from ttlpolicy.serving.knobs import tenancy_from_env

    monkeypatch.setenv("TTLPOLICY_TENANT_FIELD", "f" * 65)
    with pytest.raises(ValueError, match="TTLPOLICY_TENANT_FIELD"):
        tenancy_from_env()
    monkeypatch.setenv("TTLPOLICY_TENANT_FIELD", "x-tenant")
    monkeypatch.setenv("TTLPOLICY_CLIENT_IDS", "maybe")
    with pytest.raises(ValueError, match=r"TTLPOLICY_CLIENT_IDS.*'maybe'"):
        tenancy_from_env()
    monkeypatch.setenv("TTLPOLICY_CLIENT_IDS", "0")
    assert tenancy_from_env() == Tenancy("x-tenant", client_ids=False)


def test_a_continuation_matches_at_least_nine_tenths_of_the_prompt():
    assert continuation_index(0) == -1  # nothing to match
    assert continuation_index(1) == 0
    assert continuation_index(10) == 8  # the first 9 of 10 units
    for units in range(1, 500):
        matched = continuation_index(units) + 1
        assert matched >= 0.9 * units - 1e-9 and matched <= units
        assert matched - 1 < 0.9 * units  # the least that is >= 90 %
