"""Program identity from real SGLang ``Req`` objects: every field the README names, in order,
and client input that must not break the scheduler."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams
from ttlpolicy_sglang.identity import MAX_SCHEDULER_ID_BYTES, program_of, request_key

from ttlpolicy._validate import MAX_TOOL_NAME_CHARS


def req(custom: Any = None, rid: str = "r", **fields: Any) -> Req:
    return Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", [1, 2, 3]),
        sampling_params=SamplingParams(max_new_tokens=1, custom_params=custom),
        **fields,
    )


def test_custom_params_name_the_program_tool_and_last_turn() -> None:
    info = program_of(req({"program_id": "agent-7", "tool": "bash", "last_turn": "true"}))
    assert info is not None
    assert (info.program_id, info.tool, info.last_turn) == ("agent-7", "bash", True)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"session_id": "s1", "routing_key": "k1", "extra_key": "e1"}, "s1"),
        ({"routing_key": "k1", "extra_key": "e1"}, "k1"),
        ({"extra_key": "e1"}, "e1"),
    ],
)
def test_fallback_fields_in_order(fields: dict[str, str], expected: str) -> None:
    info = program_of(req(None, **fields))
    assert info is not None and info.program_id == expected and info.tool is None


def test_custom_program_id_wins_over_session_id() -> None:
    info = program_of(req({"program_id": 42}, session_id="s1"))
    assert info is not None and info.program_id == "42"


def test_no_program_is_anonymous() -> None:
    assert program_of(req()) is None
    assert program_of(req({"tool": "bash"})) is None


@pytest.mark.parametrize("bad", ["", "x" * 257, "\ud800", True, 1.5, ["a"], {"a": 1}])
def test_a_malformed_program_id_makes_the_request_anonymous(bad: Any) -> None:
    assert program_of(req({"program_id": bad}, session_id="s1")) is None


def test_an_untrusted_tool_name_is_bounded() -> None:
    info = program_of(req({"program_id": "p", "tool": "t" * 10_000}))
    assert info is not None and info.tool is not None
    assert len(info.tool) == MAX_TOOL_NAME_CHARS
    info = program_of(req({"program_id": "p", "tool": 7}))
    assert info is not None and info.tool is None


def test_request_keys_are_always_accepted_ids() -> None:
    assert request_key("abc") == "abc"
    for rid in ("", "r" * 5000, "\udc00"):
        key = request_key(rid)
        assert 0 < len(key.encode("utf-8")) <= MAX_SCHEDULER_ID_BYTES
    assert request_key("r" * 5000) != request_key("r" * 5001)
