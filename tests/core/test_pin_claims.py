"""``ttlpolicy.pin_claims``: a program's call that continues its pinned context takes the pin;
one that does not supersedes it (released at once); no pin, nothing to claim."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.ids import CONTINUATION_SHARE
from ttlpolicy.pin_claims import PinClaim, claim_pin, continues_context


def test_the_claim_of_each_case():
    assert claim_pin(False, False) is PinClaim.NO_PIN
    assert claim_pin(False, True) is PinClaim.NO_PIN
    assert claim_pin(True, True) is PinClaim.TAKE
    assert claim_pin(True, False) is PinClaim.SUPERSEDE


def test_a_whole_extension_continues_and_a_compaction_does_not():
    assert continues_context(100, 100)  # the next call extends the whole prompt
    assert continues_context(100, 90)  # a template re-rendered the last tenth
    assert not continues_context(100, 89)
    assert not continues_context(100, 3)  # a compaction keeps the system prompt only
    assert not continues_context(1, 0)
    assert continues_context(0, 0)  # a pinned prompt of no full unit: nothing to break


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_continuing_is_sharing_the_continuation_share(pinned: int, shared: int):
    shared = min(shared, pinned)
    assert continues_context(pinned, shared) == (shared >= CONTINUATION_SHARE * pinned - 1e-9)


@given(st.integers(1, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))
def test_sharing_more_never_stops_a_continuation(pinned: int, a: int, b: int):
    lo, hi = sorted((a, b))
    assert continues_context(pinned, hi) or not continues_context(pinned, lo)


@pytest.mark.parametrize(
    ("args", "error", "field"),
    [
        ((1.0, 1), TypeError, "pinned_prompt_units"),
        ((True, 1), TypeError, "pinned_prompt_units"),
        ((1, "1"), TypeError, "shared_units"),
        ((-1, 0), ValueError, "-1"),
        ((3, -2), ValueError, "-2"),
    ],
)
def test_bad_units_are_refused_by_name(args, error, field):
    with pytest.raises(error, match=field):
        continues_context(*args)


def test_bad_flags_are_refused():
    with pytest.raises(TypeError, match="holds_pin"):
        claim_pin(1, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="continues"):
        claim_pin(True, None)  # type: ignore[arg-type]
