"""``ttlpolicy.ids``: any client request id becomes an id both backends accept; a client's
program fields are bounded, and a malformed id makes the request anonymous."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy._validate import MAX_TOOL_NAME_CHARS
from ttlpolicy.ids import MAX_ID_BYTES, MAX_PROGRAM_ID_CHARS, program_info, scheduler_id


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
