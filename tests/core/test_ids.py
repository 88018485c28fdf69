"""``ttlpolicy.ids.scheduler_id``: any client request id becomes an id both backends accept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.ids import MAX_ID_BYTES, scheduler_id


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
