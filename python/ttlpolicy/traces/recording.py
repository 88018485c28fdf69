"""Reader of recorded traffic (``ttlpolicy.serving.record``): JSONL files
``record-*.jsonl``, each a header line then one line per finished call, into agent programs.

A file's header names its recording and block size; a call line has ``t`` (arrival, s),
``end`` (finish, s), ``program`` (a keyed digest; null: an anonymous call, its own one-call
program), ``tenant``, ``in``, ``out``, ``cached``, ``tool``, ``last`` and ``hash_ids`` (keyed
64-bit block ids, equal within a recording).  A program is ``<recording>:<program>``; its
calls are in file order (one recording's files in name order): ``arrival_s`` counts from its
first call, ``think_time_s`` is the gap since its previous call finished (tool or human time),
``stop`` the tool it ended with, else ``end_turn`` for a last turn.  Programs of a recording
whose oldest files were rotated away begin at their first call still on disk.

A file's last line that is torn (no newline, not JSON: the engine was killed mid-write) is
skipped and logged; a malformed line anywhere else is an error.  The reader remembers at most
``MAX_OPEN_PROGRAMS`` named programs (anonymous calls take no room): past it the one idle the
longest is forgotten, and a later call of it begins a new program; once one has been
forgotten, every program read from then on is named ``<recording>:<program>@<file>:<line>``
(where it began), so a forgotten program's later calls never join its earlier ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import (
    MAX_TEXT_CHARS,
    TraceFormatError,
    TraceRecord,
    _hashes,
    _int,
    _json_lines,
    _num,
    _text,
    open_bytes,
)

#: The header line's ``format`` and ``version`` (each file begins with one).
RECORD_FORMAT, RECORD_VERSION = "ttlpolicy-record", 1
#: Names of a recording's files (``record-<UTC start>-<recording>-<n>.jsonl``).
RECORD_PREFIX, RECORD_SUFFIX = "record-", ".jsonl"
#: Programs whose previous call is remembered while reading (a bound on the reader's state):
#: past it the one idle the longest is forgotten (its later calls: a new program).
MAX_OPEN_PROGRAMS = 1_000_000


@dataclass(slots=True)
class _Program:
    first_s: float
    prev_end_s: float
    calls: int
    session: str = ""


class _Programs:
    """Named programs by their key, the one idle the longest first; at most
    ``MAX_OPEN_PROGRAMS`` (that one is forgotten to make room)."""

    def __init__(self) -> None:
        self._open: dict[str, _Program] = {}
        self.forgotten = 0

    def take(self, key: str) -> _Program | None:
        return self._open.pop(key, None)

    def put(self, key: str, prog: _Program) -> None:
        """Remember ``prog`` as the most recently active (``take`` it first)."""
        if len(self._open) >= MAX_OPEN_PROGRAMS:
            del self._open[next(iter(self._open))]
            self.forgotten += 1
        self._open[key] = prog


def record_files(directory: str | Path) -> list[Path]:
    """The recording files in ``directory``, oldest first (their names sort by start time)."""
    return sorted(
        f
        for f in Path(directory).iterdir()
        if f.name.startswith(RECORD_PREFIX) and f.name.endswith(RECORD_SUFFIX)
    )


def is_recording(first: Any) -> bool:
    """Whether a JSONL file's first record is a recording's header."""
    return isinstance(first, dict) and first.get("format") == RECORD_FORMAT


def read_recording(paths: Iterable[str | Path]) -> Iterator[TraceRecord]:
    """The calls of recording files, in the given order (a directory's ``record_files``)."""
    programs = _Programs()
    for path in paths:
        p = Path(path)
        recording, block_tokens = "", 0
        with open_bytes(p) as f:
            for lineno, where, obj in _json_lines(p, f, torn_tail=True):
                if not recording:
                    if not is_recording(obj):
                        raise TraceFormatError(
                            p, where, "format", f"expected a {RECORD_FORMAT!r} header line"
                        )
                    version = obj.get("version")
                    if version != RECORD_VERSION:
                        raise TraceFormatError(
                            p, where, "version", f"must be {RECORD_VERSION}, got {version!r}"
                        )
                    rec = obj.get("recording")
                    if not isinstance(rec, str) or not rec:
                        raise TraceFormatError(
                            p, where, "recording", f"must be a non-empty string, got {rec!r}"
                        )
                    recording = rec[:MAX_TEXT_CHARS]
                    block_tokens = _int(p, where, obj, "block_size")
                    continue
                yield _call(p, lineno, where, obj, recording, block_tokens, programs)


def _call(
    p: Path,
    lineno: int,
    where: str,
    obj: dict[str, Any],
    recording: str,
    block_tokens: int,
    programs: _Programs,
) -> TraceRecord:
    arrival = _num(p, where, obj, "t")
    end = _num(p, where, obj, "end")
    if end < arrival:
        raise TraceFormatError(p, where, "end", f"{end!r} is before the arrival t={arrival!r}")
    program = obj.get("program")
    if program is not None and (not isinstance(program, str) or not program):
        raise TraceFormatError(
            p, where, "program", f"must be a non-empty string or null, got {program!r}"
        )
    last = obj.get("last", False)
    if not isinstance(last, bool):
        raise TraceFormatError(p, where, "last", f"must be true or false, got {last!r}")
    tool = _text(obj.get("tool"))
    if program is None:  # anonymous: its own one-call program (not remembered)
        session, prog = f"{recording}:{p.name}:{lineno}", _Program(arrival, end, 0)
        think = 0.0
    else:
        key = f"{recording}:{program[:MAX_TEXT_CHARS]}"
        found = programs.take(key)
        if found is None:
            # a program forgotten (idle the longest) may come back: then a new one
            session = key if not programs.forgotten else f"{key}@{p.name}:{lineno}"
            prog, think = _Program(arrival, end, 0, session), 0.0
        else:
            prog = found
            session, think = prog.session, max(0.0, arrival - prog.prev_end_s)
        programs.put(key, prog)
    record = TraceRecord(
        session_id=session,
        index=prog.calls,
        arrival_s=max(0.0, arrival - prog.first_s),
        input_tokens=_int(p, where, obj, "in"),
        output_tokens=_int(p, where, obj, "out"),
        hash_ids=_hashes(p, where, obj),
        block_tokens=block_tokens,
        stop=tool if tool is not None else ("end_turn" if last else None),
        think_time_s=think,
        api_time_s=end - arrival,
    )
    _int(p, where, obj, "cached")  # checked: what the engine served from cache
    prog.prev_end_s, prog.calls = end, prog.calls + 1
    return record
