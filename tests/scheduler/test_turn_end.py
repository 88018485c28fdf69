"""A turn's end (``TurnEnd``) is one object from the engine to the core (issue 48): the
scheduler's and the lifecycle's ``finish`` take it whole or its fields as keywords, on both
backends alike, field by field — the reference's dataclass, its typed keywords (the stub's
``**fields``), the binding's list of names and the core's struct.  A field added to one and
not the others fails here: ``BAD`` must name every field, each bad value must be refused
naming its field in either form, and the two forms must give the same answers."""

from __future__ import annotations

import dataclasses
import typing
from functools import partial
from typing import Any

import pytest

from conftest import NATIVE, REFERENCE, Backend
from parity import PINNING_MISS_COST_S, outcome
from ttlpolicy import TurnEnd
from ttlpolicy.reference.scheduler import TURN_END_FIELDS, TurnEndFields

#: A value each field refuses, with the words the error must say (its field among them).
BAD: dict[str, tuple[Any, str]] = {
    "tool": (3, "tool must be a str or None"),
    "last_turn": (1, "last_turn must be a bool"),
    "cache_miss_cost_s": (-1.0, "cache_miss_cost_s"),
    "prefix_tokens": (-1, "prefix_tokens"),
    "offloaded_tokens": (2.5, "offloaded_tokens"),
    "mean_active_blocks": (0.0, "mean_active_blocks"),
}
#: A turn that pins (and so reaches the policy's decision through every field).
PINNING = {
    "tool": "bash",
    "cache_miss_cost_s": PINNING_MISS_COST_S,
    "prefix_tokens": 4000,
    "offloaded_tokens": 1000,
    "mean_active_blocks": 20.0,
}


def running(impl: Backend, lifecycle: bool) -> Any:
    """A scheduler (or a lifecycle over one, with load control) whose request ``r1`` runs."""
    policy = impl.TTLPolicy()
    sched = impl.ProgramScheduler(policy, total_blocks=100, pin_budget_blocks=50)
    if not lifecycle:
        sched.arrive("r1", "A", 0.0, 10)
        sched.pop(0.0)
        return sched
    life = impl.ProgramLifecycle(sched, impl.AdmissionControl(policy, total_blocks=100))
    life.arrive("r1", "A", 0.0, 10)
    sched.pop(0.0)
    return life


BOTH = [
    pytest.param(REFERENCE, id="python"),
    pytest.param(
        NATIVE, id="rust", marks=pytest.mark.skipif(NATIVE is None, reason="no native module")
    ),
]
WHERE = [pytest.param(False, id="scheduler"), pytest.param(True, id="lifecycle")]


def test_bad_names_every_field_and_the_typed_keywords_are_the_fields() -> None:
    assert tuple(BAD) == TURN_END_FIELDS
    assert typing.get_type_hints(TurnEndFields) == typing.get_type_hints(TurnEnd)
    assert not TurnEndFields.__required_keys__  # every keyword may be left out


@pytest.mark.parametrize("impl", BOTH)
@pytest.mark.parametrize("lifecycle", WHERE)
@pytest.mark.parametrize("field", TURN_END_FIELDS)
def test_each_field_is_read_in_either_form(impl: Backend, lifecycle: bool, field: str) -> None:
    value, words = BAD[field]
    by_keyword = outcome(lambda: running(impl, lifecycle).finish("r1", 1.0, 10, **{field: value}))
    in_object = outcome(
        lambda: running(impl, lifecycle).finish("r1", 1.0, 10, TurnEnd(**{field: value}))
    )
    assert by_keyword[0] == "raised" and words in by_keyword[1][1], by_keyword
    assert in_object == by_keyword


@pytest.mark.parametrize("impl", BOTH)
@pytest.mark.parametrize("lifecycle", WHERE)
@pytest.mark.parametrize("given", [{}, PINNING, {**PINNING, "last_turn": True}])
def test_the_two_forms_and_the_defaults_agree(
    impl: Backend, lifecycle: bool, given: dict[str, Any]
) -> None:
    """Keywords, the object, and every left-out field at its ``TurnEnd`` default: one answer
    (and the same state after: a second finish of ``r1`` is refused alike)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TurnEnd)}
    forms = [
        lambda f: f.finish("r1", 1.0, 10, **given),
        lambda f: f.finish("r1", 1.0, 10, TurnEnd(**given)),
        lambda f: f.finish("r1", 1.0, 10, turn=TurnEnd(**given)),
        lambda f: f.finish("r1", 1.0, 10, **{**defaults, **given}),
    ]
    answers = []
    for form in forms:
        obj = running(impl, lifecycle)
        answers.append((outcome(partial(form, obj)), outcome(partial(obj.finish, "r1", 2.0, 1))))
    assert answers[0][0][0] == "ok"
    assert answers[1:] == answers[:1] * 3
    if given is PINNING:
        assert answers[0][0][1][2] is not None  # it pinned: the fields reached the decision


@pytest.mark.parametrize("lifecycle", WHERE)
@pytest.mark.parametrize(
    "call",
    [
        lambda f: f.finish("r1", 1.0, 10, tools="bash"),
        lambda f: f.finish("r1", 1.0, 10, TurnEnd(), tool="bash"),
        lambda f: f.finish("r1", 1.0, 10, {"tool": "bash"}),
        lambda f: f.finish("r1", 1.0, 10, **{"tool": None, "x y": 1}),
    ],
    ids=["unknown keyword", "both forms", "not a TurnEnd", "a name no keyword has"],
)
def test_a_bad_turn_is_refused_alike(backends: Any, lifecycle: bool, call: Any) -> None:
    ref, nat = backends
    got = [outcome(partial(call, running(b, lifecycle))) for b in (ref, nat)]
    assert got[0][0] == "raised" and got[0][1][0] is TypeError, got
    assert got[1] == got[0]
