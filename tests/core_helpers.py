"""Helpers shared by the decision-core tests: comparing outcomes of the two backends."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

REL = 1e-9

#: Fields of a PinDecision, in order.
DECISION_FIELDS = ("ttl_s", "benefit_s", "cost_per_s", "p_return", "source")


def plain(x: Any) -> Any:
    """A backend-neutral form of a result: PinDecisions become field tuples."""
    if hasattr(x, "p_return") and hasattr(x, "source"):
        return ("PinDecision", *(getattr(x, f) for f in DECISION_FIELDS))
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result) or ("raised", exception type)."""
    try:
        return "ok", plain(call())
    except (TypeError, ValueError, KeyError) as e:  # the types the API promises
        return "raised", type(e)


def close(a: Any, b: Any) -> bool:
    """Equal, floats within REL relative (NaN equals NaN), recursively; int vs bool strict."""
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= REL * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


def assert_same(a: Any, b: Any, what: str = "") -> None:
    assert close(a, b), f"{what}: reference {a!r} != native {b!r}"
