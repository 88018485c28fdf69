"""Pareto front and hypervolume over (cost ↓, throughput ↑, mean TTFT ↓).

Hypervolume is computed on normalised objectives: each is mapped to [0, 1] between the best
and worst value of a ``bounds`` set of points (1 = worst), and the volume dominated up to the
reference point (1.1, 1.1, 1.1) is measured exactly (slices along TTFT, each a 2-D staircase).
Two fronts are compared on the same bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

REF = 1.1
Objectives = tuple[float, float, float]  # all to minimise: cost, −throughput, ttft


def as_min(point: dict[str, float], cost_key: str = "cost_usd_per_h") -> Objectives:
    return (point[cost_key], -point["throughput_tok_s"], point["ttft_mean_s"])


def dominates(a: Objectives, b: Objectives) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def front_indices(points: Sequence[Objectives]) -> list[int]:
    """Indices of the non-dominated points (the first of exact duplicates only)."""
    out = []
    for i, p in enumerate(points):
        if any(dominates(q, p) or (q == p and j < i) for j, q in enumerate(points) if j != i):
            continue
        out.append(i)
    return out


def normaliser(bounds: Sequence[Objectives]):
    lo = [min(p[k] for p in bounds) for k in range(3)]
    hi = [max(p[k] for p in bounds) for k in range(3)]

    def norm(p: Objectives) -> Objectives:
        return tuple(  # type: ignore[return-value]
            (p[k] - lo[k]) / (hi[k] - lo[k]) if hi[k] > lo[k] else 0.0 for k in range(3)
        )

    return norm


def _hv2(points: list[tuple[float, float]]) -> float:
    """Area dominated by ``points`` (minimised) up to (REF, REF)."""
    pts = sorted(p for p in points if p[0] < REF and p[1] < REF)
    area, best_y = 0.0, REF
    for i, (x, y) in enumerate(pts):
        best_y = min(best_y, y)
        x_next = pts[i + 1][0] if i + 1 < len(pts) else REF
        area += (x_next - x) * (REF - best_y)
    return area


def hypervolume(points: Sequence[Objectives], bounds: Sequence[Objectives]) -> float:
    """Normalised hypervolume of ``points`` (see the module doc); 0 for no points."""
    if not points:
        return 0.0
    norm = normaliser(bounds)
    pts = sorted((norm(p) for p in points), key=lambda p: p[2])
    pts = [p for p in pts if all(x < REF for x in p)]
    vol = 0.0
    for i, p in enumerate(pts):
        z_next = pts[i + 1][2] if i + 1 < len(pts) else REF
        if z_next > p[2]:
            vol += (z_next - p[2]) * _hv2([(q[0], q[1]) for q in pts[: i + 1]])
    return vol
