"""Program identity from what the client sent (no engine needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy_vllm.identity import (
    MAX_PROGRAM_ID_CHARS,
    MAX_SCHEDULER_ID_BYTES,
    ProgramInfo,
    Tenancy,
    program_of,
    scheduler_key,
)


def request(extra: Any = None, session_id: Any = None) -> SimpleNamespace:
    return SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra), session_id=session_id)


def test_extra_args_name_the_program() -> None:
    info = program_of(request({"program_id": "agent-7", "last_turn": True, "tool": "grep"}))
    assert info == ProgramInfo("agent-7", True, "grep")


def test_session_id_is_the_fallback_and_extra_args_win() -> None:
    assert program_of(request(None, "sess-1")) == ProgramInfo("sess-1", False, None)
    info = program_of(request({"program_id": "p"}, "sess-1"))
    assert info is not None and info.program_id == "p"


def test_http_spellings_of_last_turn() -> None:
    # vllm_xargs carries str/int/float only
    for v, want in ((1, True), ("true", True), ("1", True), (0, False), ("no", False)):
        info = program_of(request({"program_id": "p", "last_turn": v}))
        assert info is not None and info.last_turn is want


def test_anonymous_and_malformed_requests_are_stock() -> None:
    assert program_of(request()) is None
    assert program_of(request({"other": 1})) is None
    assert program_of(request({"program_id": ""})) is None
    assert program_of(request({"program_id": ["x"]})) is None
    assert program_of(request({"program_id": "x" * (MAX_PROGRAM_ID_CHARS + 1)})) is None
    assert program_of(SimpleNamespace(sampling_params=None)) is None
    assert program_of(request({"program_id": "a\ud800b"})) is None  # lone surrogate


@given(st.dictionaries(st.sampled_from(["program_id", "last_turn", "tool"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                 st.text(max_size=300), st.lists(st.integers()))),
       st.one_of(st.none(), st.text(max_size=300)))  # fmt: skip
def test_never_raises_on_client_input(extra: dict[str, Any], session_id: Any) -> None:
    info = program_of(request(extra, session_id))
    if info is not None:
        assert 0 < len(info.program_id) <= MAX_PROGRAM_ID_CHARS
        assert info.tool is None or len(info.tool) <= 128


def test_scheduler_key_keeps_short_ids_and_bounds_the_rest() -> None:
    assert scheduler_key("cmpl-1234-0") == "cmpl-1234-0"
    edge = "é" * (MAX_SCHEDULER_ID_BYTES // 2)  # exactly 1024 bytes of UTF-8
    assert scheduler_key(edge) == edge
    long_a, long_b = "a" * 5000, "a" * 4999 + "b"
    ka, kb = scheduler_key(long_a), scheduler_key(long_b)
    assert ka != kb and ka == scheduler_key(long_a)  # distinct, stable
    assert len(ka.encode()) <= MAX_SCHEDULER_ID_BYTES
    assert scheduler_key("x\ud800") != "x\ud800"  # lone surrogate: not valid text


@given(st.text(max_size=3000))
def test_scheduler_key_is_always_acceptable(request_id: str) -> None:
    key = scheduler_key(request_id)
    assert key and len(key.encode("utf-8")) <= MAX_SCHEDULER_ID_BYTES


def test_the_program_is_its_tenants() -> None:
    def salted(salt: Any, extra: Any) -> SimpleNamespace:
        r = request(extra)
        r.cache_salt = salt
        return r

    mine, theirs, bare = (
        program_of(salted(s, {"program_id": "p"})) for s in ("salt-a", "salt-b", None)
    )
    assert mine is not None and theirs is not None and bare is not None
    assert len({mine.program_id, theirs.program_id, bare.program_id}) == 3
    assert bare.program_id == "p"  # without a tenant: the shared namespace
    gateway = Tenancy(tenant_field="tenant")
    a1 = program_of(salted("s1", {"program_id": "p", "tenant": "t1"}), gateway)
    a2 = program_of(salted("s2", {"program_id": "p", "tenant": "t1"}), gateway)
    assert a1 == a2  # the trusted field names the tenant, not the salt
    assert program_of(salted("s1", {"program_id": "p"}), Tenancy(client_ids=False)) is None
