"""Input checks shared by the pure-Python reference.

The Rust core performs the same checks and raises the same exception types, so a bad value is
rejected identically by both backends: ``TypeError`` for a wrong type, ``ValueError`` for a
value out of range.  Every message names the field and the offending value.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: Tool names come from model output: they are cut to this many code points.
MAX_TOOL_NAME_CHARS = 128
#: A refused value is shown as its repr cut to this many code points (it may be untrusted).
MAX_REPR_CHARS = 80
#: Larger ints are shown as their size (printing a huge int is slow, or refused).
MAX_PRINTED_INT_BITS = 256
#: Ids (programs, requests, tenants) are at most this many bytes of UTF-8.
MAX_ID_BYTES = 1024
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def short_repr(value: Any) -> str:
    """How a message shows a refused value; the native conversions print it the same way."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_PRINTED_INT_BITS:
            return f"an int of {value.bit_length()} bits"
        return int.__repr__(value)
    try:
        r = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return r if len(r) <= MAX_REPR_CHARS else r[:MAX_REPR_CHARS] + "..."


def as_float(field: str, value: Any) -> float:
    """A real number through ``__float__`` or ``__index__`` (int, float, bool, numpy scalars),
    exactly what the native side accepts.  str, bytes and None have neither: float("1.5")
    parses text, which is not a conversion we want.  An int too large for a float is a
    ValueError (its value is out of range), not an OverflowError."""
    kind = type(value)
    if kind is float:
        return value
    if not (hasattr(kind, "__float__") or hasattr(kind, "__index__")):
        raise TypeError(f"{field} must be a number, got {short_repr(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{field} is out of range, got an int too large for a float") from None
    except (TypeError, ValueError):
        raise TypeError(f"{field} must be a number, got {short_repr(value)}") from None


def finite(field: str, value: Any) -> float:
    x = as_float(field, value)
    if not math.isfinite(x):
        raise ValueError(f"{field} must be finite, got {x!r}")
    return x


def non_negative(field: str, value: Any) -> float:
    x = finite(field, value)
    if x < 0.0:
        raise ValueError(f"{field} must be >= 0, got {x!r}")
    return x


def positive(field: str, value: Any) -> float:
    x = finite(field, value)
    if not x > 0.0:
        raise ValueError(f"{field} must be > 0, got {x!r}")
    return x


def as_int(field: str, value: Any) -> int:
    """An integer through ``__index__`` (int, bool, numpy integers); floats are refused even
    when whole."""
    if isinstance(value, float):
        raise TypeError(f"{field} must be an integer, got {short_repr(value)}")
    try:
        return int(operator.index(value))
    except TypeError:
        raise TypeError(f"{field} must be an integer, got {short_repr(value)}") from None


def int_in(field: str, value: Any, low: int, high: int) -> int:
    n = as_int(field, value)
    if not low <= n <= high:
        raise ValueError(f"{field} must be in [{low}, {high}], got {short_repr(n)}")
    return n


def tool_key(tool: Any) -> str | None:
    """Normalise an untrusted tool name: None stays None (unknown tool); lone surrogates become
    U+FFFD; the result is cut to MAX_TOOL_NAME_CHARS code points.  Never raises on a str."""
    if tool is None:
        return None
    if not isinstance(tool, str):
        raise TypeError(f"tool must be a str or None, got {type(tool).__name__}")
    if not tool.isascii():
        tool = tool.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return tool[:MAX_TOOL_NAME_CHARS]


def check_id(field: str, value: Any) -> str:
    size = _utf8_size(field, value)
    if not 0 < size <= MAX_ID_BYTES:
        raise ValueError(f"{field} must be 1 to {MAX_ID_BYTES} bytes of UTF-8, got {size} bytes")
    return value


def check_tenant(value: Any) -> str:
    """A tenant (``ToolHistory``'s namespace of tool names): an id as ``check_id`` takes it,
    or ``""`` (the shared one); a plain str (a subclass's ``__eq__`` and ``__hash__`` never
    key a table)."""
    size = _utf8_size("tenant", value)
    if size > MAX_ID_BYTES:
        raise ValueError(f"tenant must be 0 to {MAX_ID_BYTES} bytes of UTF-8, got {size} bytes")
    return str.__str__(value)


def _utf8_size(field: str, value: Any) -> int:
    """The bytes of UTF-8 of a str, refusing anything else and lone surrogates."""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{field} must be valid Unicode, got {short_repr(value)}") from None


def seq_items(field: str, kind: str, values: Any) -> list[Any]:
    """The items of a sequence of ``kind`` (a str or bytes is refused: it would read as one
    item per character)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{field} must be a sequence of {kind}, got {type(values).__name__}")
    return [v for v in values]  # (not list(): it would trust a lying __len__ as a size)


def check_ids(field: str, values: Any) -> list[str]:
    return [check_id(field, v) for v in seq_items(field, "str", values)]


# -- the fields of a result type built by a caller (the native classes convert them alike) ---


def unchecked(cls: type[T], *values: Any) -> T:
    """A result type (a frozen dataclass) built from values its maker checked already: the
    reference's own results skip the checks its ``__post_init__`` makes of a caller's."""
    obj = object.__new__(cls)
    for name, value in zip(cls.__match_args__, values, strict=True):  # type: ignore[attr-defined]
        object.__setattr__(obj, name, value)
    return obj


def id_field(field: str, value: Any) -> str:
    # a str subclass held as a plain str of its own characters, as natively (str() would call
    # an overridden __str__)
    return str.__str__(check_id(field, value))


def i64_field(field: str, value: Any) -> int:
    return int_in(field, value, I64_MIN, I64_MAX)


def count_field(field: str, value: Any) -> int:
    return int_in(field, value, 0, I64_MAX)


def instance_or_none(field: str, what: str, value: Any, cls: type) -> Any:
    if value is not None and not isinstance(value, cls):
        raise TypeError(f"{field} must be {what} or None, got {type(value).__name__}")
    return value
