"""Helpers shared by every test that holds the two backends together (Rust core, Python
reference): results as backend-neutral plain values, outcomes with the exception's type AND
message, and comparison with the differential tests' 1e-9 relative float tolerance."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

REL = 1e-9

#: a cost-benefit setting where the cold-start policy pins (τ = μ·ln(B/(c·μ)) > 0)
PINNING_MISS_COST_S = 100.0

#: The exception types the API promises for bad input.
API_ERRORS = (TypeError, ValueError, KeyError)

#: What the native module has besides the public names: the hook the package calls at import,
#: the core's tables (``SOURCES``, the config's defaults and ``published()`` by field) and
#: what the build was made from (``__version__``, ``SOURCE_DIGEST``).
NATIVE_TABLES = {
    "set_config_class",
    "__version__",
    "SOURCE_DIGEST",
    "SOURCES",
    "POLICY_CONFIG_DEFAULTS",
    "POLICY_CONFIG_PUBLISHED",
}

#: Public names one class serves on both backends (not a twin per backend): the backend's
#: name, the config and a turn's end (the native binding reads their fields).
SHARED = frozenset({"backend", "PolicyConfig", "TurnEnd"})

#: Fields of each result type, in the reference's dataclass order.
RESULT_FIELDS = {
    "PinDecision": ("ttl_s", "benefit_s", "cost_per_s", "p_return", "source"),
    "Pin": ("program_id", "blocks", "deadline_s"),
    "Ended": ("program_id", "turns", "pin", "request_ids"),
    "Finished": ("decision", "pin", "ended"),
    "GroupStats": ("key", "blocks", "accesses", "hits", "reuse_s", "ttl_s", "last_access_s"),
    "Link": ("kind", "program", "parent", "depth_blocks", "context_blocks"),
}


def plain(x: Any) -> Any:
    """A backend-neutral form of a result: result objects become (name, *fields) tuples,
    lists and tuples are converted item by item, dicts value by value."""
    name = type(x).__name__
    if name in RESULT_FIELDS and not isinstance(x, (tuple, list)):
        if name == "Finished":
            assert x.pinned == (x.pin is not None)
        return (name, *(plain(getattr(x, f)) for f in RESULT_FIELDS[name]))
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", plain result) or ("raised", (exception type, message))."""
    try:
        return "ok", plain(call())
    except API_ERRORS as e:
        return "raised", (type(e), str(e))


def close(a: Any, b: Any, abs_tol: float = 0.0) -> bool:
    """Equal, floats within REL relative or ``abs_tol`` absolute (NaN equals NaN),
    recursively; int vs bool strict."""
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= max(REL * max(abs(a), abs(b)), abs_tol)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, abs_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(close(a[k], b[k], abs_tol) for k in a)
    return type(a) is type(b) and a == b


def assert_same(a: Any, b: Any, what: str = "") -> None:
    assert close(a, b), f"{what}: reference {a!r} != native {b!r}"


def scheduler_snapshot(s: Any) -> tuple:
    """Every read-only view of a ProgramScheduler, as plain values."""
    return plain(
        (
            s.pinned_blocks,
            s.pin_count,
            s.waiting_count,
            s.running_count,
            s.program_count,
            s.dropped_idle_programs,
            s.next_deadline_s,
            s.mean_active_blocks,
            s.pins(),
            s.peek(),
            s.first_waiting(8),
            s.serve_order,
        )
    )


def tree_snapshot(tree: Any) -> list:
    """Every read-only view of a PrefixTree, as plain values."""
    return [plain(g) for g in tree.groups()] + [
        len(tree),
        tree.expired_blocks,
        tree.evicted_blocks,
    ]
