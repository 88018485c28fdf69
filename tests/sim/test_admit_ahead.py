"""bench/admit_ahead.py: when load control refuses the head program, a younger program whose
own footprint fits its rule is admitted and runs — the first of the next K, and one head is
passed at most P times; with nothing younger that fits, the run is the library's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_skip_ahead import B2, A, B, C, finish_s, program  # (the same small engine and calls)

from ttlpolicy.sim import make_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import admit_ahead  # (bench/)

# a holds 150 of the 200 blocks for 400 decode steps, alone in flight (load control's mean is
# then 0): b (100 blocks) is refused (150 + 100 > 200), c (10) would fit (150 + 10)


@pytest.mark.parametrize("name", ["ttlpolicy-offload", "ttlpolicy-offload+skip=2"])
def test_a_younger_program_that_fits_passes_a_refused_head(name: str) -> None:
    arrivals = [(0.0, A), (0.5, B), (0.6, C)]
    plain = finish_s(make_policy("ttlpolicy-offload"), arrivals)
    assert plain["c"] > plain["a"]  # (FCFS: c waits for b, b for a)
    policy = admit_ahead.make_admit_policy(f"{name}+admitskip=2")
    passed = finish_s(policy, arrivals)
    assert passed["c"] < passed["a"]  # c ran beside a
    assert passed["b"] >= passed["a"]  # b still waited
    assert policy.admitskips == 1 and policy.skips == 0  # type: ignore[attr-defined]


def test_with_nothing_younger_that_fits_the_run_is_the_librarys() -> None:
    arrivals = [(0.0, A), (0.5, B), (0.55, B2)]  # (b2: 150 + 100 > 200 as well)
    policy = admit_ahead.make_admit_policy("ttlpolicy-offload+admitskip=8")
    assert finish_s(policy, arrivals) == finish_s(make_policy("ttlpolicy-offload"), arrivals)
    assert policy.admitskips == 0  # type: ignore[attr-defined]


def test_the_pass_looks_no_further_than_its_depth() -> None:
    arrivals = [(0.0, A), (0.5, B), (0.55, B2), (0.6, C)]  # (c is the 2nd behind b)
    one = admit_ahead.make_admit_policy("ttlpolicy-offload+admitskip=1")
    assert finish_s(one, arrivals)["c"] > finish_s(one, [(0.0, A)])["a"]
    assert one.admitskips == 0  # type: ignore[attr-defined]
    two = admit_ahead.make_admit_policy("ttlpolicy-offload+admitskip=2")
    assert finish_s(two, arrivals)["c"] < 2.0
    assert two.admitskips == 1  # type: ignore[attr-defined]


def test_one_head_is_passed_at_most_p_times() -> None:
    # a (100 blocks) runs; b (150) is refused; c and c2 (10 each) fit by their own footprints
    # one after the other (then the mean of a and c, 55: 110 + 55 <= 200)
    a, b = program("a", 100, 400), program("b", 150, 20)
    c2 = program("c2", 10, 20)
    arrivals = [(0.0, a), (0.5, b), (0.6, C), (0.7, c2)]
    runs = {}
    for passes in (0, 1, 2):
        policy = admit_ahead.make_admit_policy(f"ttlpolicy-offload+admitskip=4@{passes}")
        runs[passes] = finish_s(policy, arrivals), policy.admitskips  # type: ignore[attr-defined]
    assert runs[0] == (finish_s(make_policy("ttlpolicy-offload"), arrivals), 0)
    (one, n1), (two, n2) = runs[1], runs[2]
    assert (n1, n2) == (1, 2)
    assert one["c"] < one["a"] < one["c2"]
    assert two["c2"] < two["a"]


@pytest.mark.parametrize(
    "name",
    ["ttlpolicy-offload+admitskip=0", "ttlpolicy-offload+admitskip=x", "mori+admitskip=2",
     "ttlpolicy-offload+admitskip=2@-1", "ttlpolicy-offload+skip=0+admitskip=2"],
)  # fmt: skip
def test_a_bad_admitskip_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ValueError, match=r"admitskip|depth|passes"):
        admit_ahead.make_admit_policy(name)
