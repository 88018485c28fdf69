"""ttlpolicy.serving.skip_ahead: past a head too large for memory, the first of the next
``depth`` waiting requests in the scheduler's order that fits and that load control lets run;
never the head, never further than ``depth``, and nothing asked of a request that does not
fit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.serving.skip_ahead import (
    MAX_PASSES,
    MAX_SKIP_DEPTH,
    SKIP_DEPTH,
    HeadSkips,
    check_skip_depth,
    skip_depth_for,
    skip_past,
)


def queue(impl, arrivals: list[tuple[str, str]]):
    """A ProgramScheduler with ``arrivals`` (request, program) waiting, one a second."""
    s = impl.ProgramScheduler(impl.TTLPolicy(PolicyConfig()), 1000, 100)
    for i, (rid, pid) in enumerate(arrivals):
        s.arrive(rid, pid, float(i), 1)
    return s


def test_the_first_that_fits_and_may_run_goes_past_the_head(impl):
    # (program FCFS: a's calls, then b's, then c's, d's)
    s = queue(impl, [("a1", "a"), ("b1", "b"), ("c1", "c"), ("d1", "d")])
    assert s.peek() == "a1"
    asked: list[tuple[str, str]] = []

    def fits(rid: str) -> bool:
        asked.append(("fits", rid))
        return rid in {"c1", "d1"}

    def may_run(rid: str) -> bool:
        asked.append(("may_run", rid))
        return rid == "d1"

    assert skip_past(s, "a1", 8, fits, may_run) == "d1"
    # in the queue's order, and load control asked only of what fits (it may admit)
    assert asked == [("fits", "b1"), ("fits", "c1"), ("may_run", "c1"), ("fits", "d1"),
                     ("may_run", "d1")]  # fmt: skip
    assert s.peek() == "a1" and s.waiting_count == 4  # (asking changes nothing)


def test_none_fits_or_depth_zero_leaves_the_head(impl):
    s = queue(impl, [("a1", "a"), ("b1", "b")])
    assert skip_past(s, "a1", 8, lambda rid: False, lambda rid: True) is None
    assert skip_past(s, "a1", 0, lambda rid: True, lambda rid: True) is None


def test_no_further_than_the_depth(impl):
    s = queue(impl, [("a1", "a"), ("b1", "b"), ("c1", "c"), ("d1", "d")])
    fits = {"d1"}.__contains__
    assert skip_past(s, "a1", 2, fits, lambda rid: True) is None  # (d1 is the 3rd behind)
    assert skip_past(s, "a1", 3, fits, lambda rid: True) == "d1"


@given(
    programs=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    fitting=st.sets(st.integers(0, 29)),
    allowed=st.sets(st.integers(0, 29)),
    depth=st.integers(0, 10),
)
def test_the_answer_is_the_first_runnable_within_reach(impl, programs, fitting, allowed, depth):
    s = queue(impl, [(f"r{i}", f"p{p}") for i, p in enumerate(programs)])
    head = s.peek()
    order = s.first_waiting(len(programs))

    def ok(rid: str) -> bool:
        return int(rid[1:]) in fitting and int(rid[1:]) in allowed

    chosen = skip_past(s, head, depth, lambda rid: int(rid[1:]) in fitting,
                       lambda rid: int(rid[1:]) in allowed)  # fmt: skip
    reach = [rid for rid in order if rid != head][:depth]
    if chosen is None:
        assert not any(ok(rid) for rid in reach)
    else:
        assert chosen != head and chosen in reach and ok(chosen)
        assert not any(ok(rid) for rid in reach[: reach.index(chosen)])


def test_the_default_depth_needs_a_reload_tier():
    assert skip_depth_for(True) == SKIP_DEPTH > 0
    assert skip_depth_for(False) == 0


@pytest.mark.parametrize("bad", [-1, MAX_SKIP_DEPTH + 1, 2.0, "8", True, None])
def test_a_bad_depth_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"^skip_depth must be an integer in \[0, 64\]"):
        check_skip_depth(bad)
    assert check_skip_depth(MAX_SKIP_DEPTH) == MAX_SKIP_DEPTH


def test_a_head_is_passed_at_most_max_passes_times(impl):
    s = queue(impl, [("a1", "a"), *((f"r{i}", f"p{i}") for i in range(3))])
    skips = HeadSkips(8)
    for _ in range(MAX_PASSES):
        assert skips.choose(s, "a1", lambda rid: True, lambda rid: True) == "r0"
        skips.taken()
    assert skips.choose(s, "a1", lambda rid: True, lambda rid: True) is None  # a1 waits its turn
    # (asking is not passing: only ``taken`` counts)
    s2 = queue(impl, [("b1", "b"), ("c1", "c")])
    fresh = HeadSkips(8)
    for _ in range(MAX_PASSES + 1):
        assert fresh.choose(s2, "b1", lambda rid: True, lambda rid: True) == "c1"
    # another head is passed afresh
    assert skips.choose(s, "r0", lambda rid: True, lambda rid: True) == "a1"


def test_depth_zero_never_skips_and_a_bad_depth_is_refused():
    assert HeadSkips(0).depth == 0
    with pytest.raises(ValueError, match="skip_depth must be an integer"):
        HeadSkips(MAX_SKIP_DEPTH + 1)
