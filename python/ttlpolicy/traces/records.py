"""What every trace reader shares: the record type, the format error that names file, record
and field, and the checks of a record's fields (``readers`` and ``recording`` both read with
them; one module, so neither imports the other's).

What a reader takes in is bounded: a line of at most ``MAX_LINE_BYTES`` (JSONL, CSV), a
session file of at most ``MAX_DOCUMENT_BYTES`` (after gzip), JSON nested as deep as Python
parses; more is refused with a TraceFormatError (file, line, field) before it is read whole.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import math
import numbers
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

#: Free-text fields from a trace (stop reason, ids) are cut to this many characters.
MAX_TEXT_CHARS = 128
HASH_MIN, HASH_MAX = -(1 << 63), (1 << 63) - 1
#: Longest line of a JSONL or CSV trace, bytes: a recorded call of 2 M tokens at 16-token
#: engine blocks is ~3 MB; a longer line is refused before it is read whole (a small gzip can
#: expand to gigabytes on one line).
MAX_LINE_BYTES = 1 << 24
#: Largest session file (one JSON document, read whole), bytes after gzip.
MAX_DOCUMENT_BYTES = 1 << 28
#: What a file that cannot be decoded raises while it is read.
_DECODE_ERRORS = (EOFError, UnicodeDecodeError, gzip.BadGzipFile, zlib.error)
logger = logging.getLogger(__name__)


class TraceFormatError(ValueError):
    """A trace record that does not parse; the message names file, record and field."""

    def __init__(self, path: str | Path, record: str, field: str, problem: str) -> None:
        self.path, self.record, self.field = str(path), record, field
        super().__init__(f"{path}: {record}: field {field!r}: {problem}")


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One LLM request of a trace."""

    session_id: str  # program the request belongs to ("" for open-loop traces)
    index: int  # position within the session (open-loop traces: within the file)
    arrival_s: float  # seconds since the start of the session (open loop: of the trace)
    input_tokens: int  # whole context, prefix included
    output_tokens: int
    hash_ids: tuple[int, ...]  # one id per block of the input; equal ids = reusable blocks
    block_tokens: int  # tokens per hash block (0: the trace has no hashes)
    stop: str | None  # "tool_use", "end_turn", other, or None when not recorded
    think_time_s: float  # gap before this request: tool time after tool_use, else human time
    api_time_s: float | None  # how long the original API took to answer, when recorded
    hash_scope: str = ""  # "": hash ids are global; else ids are unique only within this scope
    # leading tokens of its session every session of its source shares (an agentic file's
    # tool_tokens + system_tokens: tool definitions and system prompt); 0: not recorded
    common_prefix_tokens: int = 0


def open_text(path: str | Path) -> IO[str]:
    p = Path(path)
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8")
    return open(p, encoding="utf-8")


def open_bytes(path: str | Path) -> IO[bytes]:
    """The file's bytes (gunzipped for ``.gz``): the readers decode line by line, so a bad
    byte is reported at its own line (a text file decodes ahead, in chunks)."""
    p = Path(path)
    return cast(IO[bytes], gzip.open(p, "rb")) if p.suffix == ".gz" else open(p, "rb")


def read_document(path: Path, f: IO[bytes]) -> Any:
    """The one JSON document of a file (a session), at most ``MAX_DOCUMENT_BYTES``."""
    try:
        data = f.read(MAX_DOCUMENT_BYTES + 1)
    except _DECODE_ERRORS as e:
        raise TraceFormatError(path, "session", "(file)", f"cannot be decoded: {e}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise TraceFormatError(
            path, "session", "(file)", f"larger than {MAX_DOCUMENT_BYTES} bytes (the limit)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TraceFormatError(path, f"line {line}", "(file)", f"cannot be decoded: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(path, f"line {e.lineno}", "(json)", e.msg) from None
    except (ValueError, RecursionError) as e:  # (an integer of over 4300 digits; nesting)
        raise TraceFormatError(path, "session", "(json)", _json_problem(e)) from None


def _json_problem(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply to parse"
    if "digits" in str(e):  # (Python's own message names a function to call)
        return f"an integer of more than {sys.get_int_max_str_digits()} digits (the limit)"
    return str(e)


#: What a time may be (int and float first: what JSON gives, checked fastest).
_REAL = (int, float, numbers.Real)
#: What a count may be.
_INTEGRAL = (int, numbers.Integral)


def time_problem(v: object) -> str | None:
    """Why ``v`` may not be a time of a trace record (seconds, a timestamp), or None: a time
    is a finite number >= 0, not a bool, and fits a float.  The one statement of the rule:
    the readers check a field with it, the recorder (``ttlpolicy.serving.record``) a call's
    times before it writes one, so it never writes what the reader refuses.  Any real
    number is one (numpy's too: a recorder's caller may hand them); JSON gives int and
    float."""
    if isinstance(v, _REAL) and not isinstance(v, bool):
        try:
            if math.isfinite(v) and not v < 0:
                return None
        except OverflowError:  # (an int too large for a float)
            pass
    return f"must be a finite number >= 0, got {v!r}"


def count_problem(v: object) -> str | None:
    """Why ``v`` may not be a count of a trace record (tokens, an index), or None: a count is
    an integer >= 0, not a bool (nor a float, even a whole one).  The one statement of the
    rule, as ``time_problem``'s; any integer is one (numpy's too), JSON gives int."""
    if isinstance(v, _INTEGRAL) and not isinstance(v, bool) and not v < 0:
        return None
    return f"must be an integer >= 0, got {v!r}"


def _num(path: Path, where: str, obj: dict[str, Any], field: str, *, default: Any = ...) -> float:
    if field not in obj or obj[field] is None:
        if default is ...:
            raise TraceFormatError(path, where, field, "missing")
        return default
    v = obj[field]
    problem = time_problem(v)
    if problem is not None:
        raise TraceFormatError(path, where, field, problem)
    return float(v)


def _int(path: Path, where: str, obj: dict[str, Any], field: str) -> int:
    v: Any = obj.get(field)  # (an int once checked)
    problem = count_problem(v)
    if problem is not None:
        raise TraceFormatError(path, where, field, problem)
    return v


def _hashes(
    path: Path, where: str, obj: dict[str, Any], field: str = "hash_ids"
) -> tuple[int, ...]:
    v = obj.get(field)
    if not isinstance(v, list):
        raise TraceFormatError(
            path, where, field, f"must be a list of integers, got {type(v).__name__}"
        )
    for i, h in enumerate(v):
        if isinstance(h, bool) or not isinstance(h, int) or not HASH_MIN <= h <= HASH_MAX:
            raise TraceFormatError(
                path, where, f"{field}[{i}]", f"must be a 64-bit integer, got {h!r}"
            )
    return tuple(v)


def _text(v: Any) -> str | None:
    """An untrusted free-text field: None stays None, anything else a bounded str."""
    return None if v is None or v == "" else str(v)[:MAX_TEXT_CHARS]


def _lines(path: Path, f: IO[bytes]) -> Iterator[tuple[int, str]]:
    """Numbered lines (each of at most ``MAX_LINE_BYTES``, decoded as UTF-8); a line that
    is too long or cannot be decoded raises TraceFormatError at its line."""
    lineno = 0
    while True:
        where = f"line {lineno + 1}"
        try:
            raw = f.readline(MAX_LINE_BYTES + 1)
        except _DECODE_ERRORS as e:
            raise TraceFormatError(path, where, "(file)", f"cannot be decoded: {e}") from None
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise TraceFormatError(
                path, where, "(line)", f"longer than {MAX_LINE_BYTES} bytes (the limit)"
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceFormatError(path, where, "(file)", f"cannot be decoded: {e}") from None
        yield lineno, line


def _json_lines(
    path: Path, f: IO[bytes], *, torn_tail: bool = False
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, "line N", object) of each non-blank line of a JSONL file; a line that is
    not a JSON object raises TraceFormatError at its line.  ``torn_tail``: a last line that
    does not parse and has no newline (a write cut short: an engine killed mid-line) is
    skipped and logged; anywhere else it is an error."""
    for lineno, line in _lines(path, f):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # (JSONDecodeError, 4300+ digits, nesting)
            if torn_tail and not line.endswith("\n"):  # (only the last line lacks one)
                logger.warning(
                    "ttlpolicy: %s: %s: skipped: a torn last line (a write cut short)",
                    path,
                    where,
                )
                continue
            problem = e.msg if isinstance(e, json.JSONDecodeError) else _json_problem(e)
            raise TraceFormatError(path, where, "(json)", problem) from None
        if not isinstance(obj, dict):
            raise TraceFormatError(path, where, "(record)", "must be a JSON object")
        yield lineno, where, obj
