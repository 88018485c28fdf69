"""Shared by the scheduler tests: results of either backend as plain tuples, compared with
the 1e-9 relative float tolerance of the differential tests."""

from __future__ import annotations

import math
from typing import Any

#: a cost-benefit setting where the cold-start policy pins (τ = μ·ln(B/(c·μ)) > 0)
PINNING_MISS_COST_S = 100.0


def plain(x: Any) -> Any:
    """A backend-independent view of a scheduler result."""
    if x is None or isinstance(x, (bool, int, str, float)):
        return x
    if isinstance(x, (list, tuple)):
        return tuple(plain(v) for v in x)
    name = type(x).__name__
    if name == "Pin":
        return ("Pin", x.program_id, x.blocks, x.deadline_s)
    if name == "Ended":
        return ("Ended", x.program_id, x.turns, plain(x.pin), tuple(x.request_ids))
    if name == "Finished":
        assert x.pinned == (x.pin is not None)
        return ("Finished", plain(x.decision), plain(x.pin), plain(x.ended))
    if name == "PinDecision":
        return ("PinDecision", x.ttl_s, x.benefit_s, x.cost_per_s, x.p_return, x.source)
    raise TypeError(f"no plain view of {name}")


def snapshot(s: Any) -> tuple:
    """Every read-only view of a scheduler, as plain values."""
    return plain(
        (
            s.pinned_blocks,
            s.pin_count,
            s.waiting_count,
            s.running_count,
            s.program_count,
            s.next_deadline_s,
            s.mean_active_blocks,
            s.pins(),
            s.peek(),
        )
    )


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b
