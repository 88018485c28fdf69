"""``ttlpolicy.agent_headers``: the session ids agent clients send name a program, in one
order; every value is bounded client input and a malformed one never names a program."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.agent_headers import (
    AGENT_FIELD,
    AGENT_HEADERS,
    BODY_SESSION_FIELDS,
    MAX_AGENT_ID_CHARS,
    MAX_SESSION_ID_CHARS,
    SESSION_FIELD,
    SESSION_HEADERS,
    AgentSession,
    agent_session,
    from_fields,
)
from ttlpolicy.ids import MAX_PROGRAM_ID_CHARS, program_info


def test_each_client_header_names_its_session() -> None:
    for name in SESSION_HEADERS:
        assert agent_session({name: " s-1 "}) == AgentSession("s-1")
    assert agent_session({}, {"prompt_cache_key": "k"}) == AgentSession("k")
    assert agent_session({}) is None and agent_session({"x-other": "s"}) is None


def test_headers_are_taken_in_order_then_the_body() -> None:
    headers = {name: f"id-{i}" for i, name in enumerate(SESSION_HEADERS)}
    body = {BODY_SESSION_FIELDS[0]: "from-body"}
    for i in range(len(SESSION_HEADERS)):
        session = agent_session(headers, body)
        assert session is not None and session.session_id == f"id-{i}"
        del headers[SESSION_HEADERS[i]]
    assert agent_session(headers, body) == AgentSession("from-body")


def test_a_malformed_value_is_as_if_absent() -> None:
    too_long = "s" * (MAX_SESSION_ID_CHARS + 1)
    for bad in ("", "  ", too_long, "a\x00b", "a\ud800b", 7, None, ["s"]):
        assert agent_session({SESSION_HEADERS[0]: bad}) is None
        assert agent_session({SESSION_HEADERS[0]: bad, SESSION_HEADERS[1]: "next"}) == (
            AgentSession("next")
        )
    assert agent_session({}, {"prompt_cache_key": 12}) is None
    assert agent_session({}, ["prompt_cache_key"]) is None


def test_a_sub_agent_is_a_program_of_its_own() -> None:
    parent = agent_session({SESSION_HEADERS[0]: "s"})
    child = agent_session({SESSION_HEADERS[0]: "s", AGENT_HEADERS[0]: "a1"})
    sibling = agent_session({SESSION_HEADERS[0]: "s", AGENT_HEADERS[0]: "a2"})
    assert parent is not None and child is not None and sibling is not None
    assert parent.program_id == "s"
    assert child.program_id == "s/agent:a1"
    assert len({parent.program_id, child.program_id, sibling.program_id}) == 3
    # an agent id without a session names nothing; a malformed one is never merged into
    # its parent's program
    assert agent_session({AGENT_HEADERS[0]: "a1"}) is None
    for bad in ("", "a" * (MAX_AGENT_ID_CHARS + 1), "a\nb"):
        assert agent_session({SESSION_HEADERS[0]: "s", AGENT_HEADERS[0]: bad}) is None


def test_fields_carried_by_a_front_end_are_checked_again() -> None:
    assert from_fields({SESSION_FIELD: "s"}) == AgentSession("s")
    assert from_fields({SESSION_FIELD: "s", AGENT_FIELD: "a"}) == AgentSession("s", "a")
    assert from_fields({SESSION_FIELD: "s", AGENT_FIELD: 3}) is None
    assert from_fields({SESSION_FIELD: "\x00t:x"}) is None
    assert from_fields({AGENT_FIELD: "a"}) is None
    assert from_fields(None) is None and from_fields("s") is None


values = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=400), st.lists(st.text(), max_size=2)
)
names = st.sampled_from([*SESSION_HEADERS, *AGENT_HEADERS, *BODY_SESSION_FIELDS, "other"])


def assert_bounded(session: AgentSession | None) -> None:
    if session is None:
        return
    assert 0 < len(session.session_id) <= MAX_SESSION_ID_CHARS
    assert session.agent_id is None or 0 < len(session.agent_id) <= MAX_AGENT_ID_CHARS
    assert len(session.program_id) <= MAX_PROGRAM_ID_CHARS
    info = program_info(session.program_id)  # the library takes it as a client id
    assert info is not None and info.program_id == session.program_id


@given(st.dictionaries(names, values), st.one_of(values, st.dictionaries(names, values)))
def test_never_raises_and_every_program_id_is_valid_and_bounded(
    headers: dict[str, Any], body: Any
) -> None:
    assert_bounded(agent_session(headers, body))


@given(st.dictionaries(st.sampled_from([SESSION_FIELD, AGENT_FIELD, "program_id"]), values))
def test_carried_fields_never_raise_and_are_bounded(fields: dict[str, Any]) -> None:
    assert_bounded(from_fields(fields))


@given(st.text(min_size=1, max_size=MAX_SESSION_ID_CHARS), st.text(max_size=MAX_AGENT_ID_CHARS))
def test_distinct_sub_agents_never_share_a_program(session_id: str, agent_id: str) -> None:
    parent = agent_session({SESSION_HEADERS[0]: session_id})
    child = agent_session({SESSION_HEADERS[0]: session_id, AGENT_HEADERS[0]: agent_id})
    if parent is not None and child is not None:
        assert child.program_id != parent.program_id
