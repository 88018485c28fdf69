"""A refused value reads the same from both backends, and a client-sized one is cut
(``_validate.short_repr``: at most 80 characters of its repr): a time printed as Python prints
a float, an id that UTF-8 cannot hold (a lone surrogate) as its cut repr."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conftest import Backend

LONG_BAD_ID = "a" * 1_000_000 + "\ud800"


def refusal(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("earlier_s", [1e-5, 1e16, 2.0**64])
def test_a_time_that_goes_back_is_refused_alike(
    backends: tuple[Backend, Backend], earlier_s: float
) -> None:
    said = []
    for impl in backends:
        ac = impl.AdmissionControl(impl.TTLPolicy(), 100)
        ac.arrive("p", earlier_s, 1)
        said.append(refusal(lambda: ac.arrive("q", 0.0, 1)))  # noqa: B023
        assert ac.waiting_count + ac.admitted_count == 1  # (nothing of q recorded)
    assert said[0] == said[1]
    assert repr(earlier_s) in said[0][1]


@pytest.mark.parametrize("bad_id", ["x\ud800", LONG_BAD_ID])
def test_an_id_utf8_cannot_hold_is_refused_alike_and_cut(
    backends: tuple[Backend, Backend], bad_id: str
) -> None:
    said = []
    for impl in backends:
        sched = impl.ProgramScheduler(impl.TTLPolicy(), total_blocks=100, pin_budget_blocks=50)
        linker = impl.ProgramLinker()
        said.append(
            [
                refusal(lambda: sched.arrive(bad_id, "p", 0.0, 1)),  # noqa: B023
                refusal(lambda: sched.arrive("r", bad_id, 0.0, 1)),  # noqa: B023
                refusal(lambda: linker.link(bad_id, [1], 0.0)),  # noqa: B023
                refusal(lambda: linker.link("t", [1], 0.0, program=bad_id)),  # noqa: B023
            ]
        )
        assert sched.waiting_count == 0 and linker.program_count == 0
    assert said[0] == said[1]
    for _, message in said[0]:
        assert len(message) <= 140 and "must be valid Unicode" in message
