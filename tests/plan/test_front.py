"""Pareto front and hypervolume."""

from __future__ import annotations

import itertools
import random

import pytest

from ttlpolicy.plan.front import REF, dominates, front_indices, hypervolume


def test_front_keeps_exactly_the_non_dominated_points():
    pts = [(1, 5, 5), (2, 4, 4), (3, 6, 6), (1, 5, 5), (5, 1, 1), (6, 1, 2)]
    assert front_indices(pts) == [0, 1, 4]


def test_hypervolume_of_the_ideal_point_is_the_whole_box():
    bounds = [(0, 0, 0), (1, 1, 1)]
    assert hypervolume([(0, 0, 0)], bounds) == pytest.approx(REF**3)
    assert hypervolume([(1, 1, 1)], bounds) == pytest.approx(0.1**3)


def test_two_points_overlap_counted_once():
    bounds = [(0, 0, 0), (1, 1, 1)]
    a, b = (0, 1, 0), (1, 0, 0)  # boxes 1.1 x 0.1 x 1.1 and 0.1 x 1.1 x 1.1, overlap 0.1^2 x 1.1
    want = 2 * 1.1 * 0.1 * 1.1 - 0.1 * 0.1 * 1.1
    assert hypervolume([a, b], bounds) == pytest.approx(want)


def test_hypervolume_matches_a_monte_carlo_estimate_and_ignores_dominated_points():
    rng = random.Random(3)
    pts = [(rng.random(), rng.random(), rng.random()) for _ in range(12)]
    bounds = [(0, 0, 0), (1, 1, 1)]
    hv = hypervolume(pts, bounds)
    assert hypervolume([pts[i] for i in front_indices(pts)], bounds) == pytest.approx(hv)
    n, inside = 40_000, 0
    for _ in range(n):
        z = tuple(rng.random() * REF for _ in range(3))
        inside += any(all(p[k] <= z[k] for k in range(3)) for p in pts)
    assert hv == pytest.approx(inside / n * REF**3, rel=0.03)


def test_dominance_is_strict():
    assert dominates((1, 1, 1), (1, 1, 2))
    assert not dominates((1, 1, 1), (1, 1, 1))
    for a, b in itertools.permutations([(0, 1, 1), (1, 0, 1)], 2):
        assert not dominates(a, b)
