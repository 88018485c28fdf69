"""Readers for the public workload traces, into one typed record stream.

* agentic sessions (``trace_NNNN.json[.gz]``, one session per file, kv-cache-tester format);
  sub-agent conversations nested in a session become sessions of their own
  (``<session>/<agent_id>``), their times shifted to the parent's clock;
* the Mooncake conversation trace (JSONL, ``timestamp`` in ms, 512-token blocks);
* the Azure LLM inference traces (CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``);
* TraceLab round traces (JSONL, one LLM round a line: ``session_id``, ``round_index``,
  ``input_tokens_total``, ``prefix_tokens``, ``output_tokens``, ``timing_events``; the
  uw-syfi/TraceLab format, read by ``read_tracelab``).  A ``.jsonl`` file is TraceLab when its
  first record has ``round_index``, else Mooncake;
* traffic recorded by the engine adapters (``TTLPOLICY_RECORD``: ``record-*.jsonl`` files, a
  header line then one call a line), read by ``recording.read_recording``: a ``.jsonl`` file
  whose first record is a ``ttlpolicy-record`` header.

Readers are generators: JSONL and CSV are streamed line by line; a session file is one JSON
document, read whole (one session), and a directory is read one file at a time.  A malformed
record raises :class:`TraceFormatError` naming the file, the record and the field; so does a
file that cannot be decoded (truncated gzip, bad UTF-8), a line longer than
``MAX_LINE_BYTES`` (16 MiB), a session file larger than ``MAX_DOCUMENT_BYTES`` (256 MiB),
JSON nested deeper than Python parses or an integer of more than 4300 digits.

Block hashes are 64-bit signed integers.  The agentic sessions number their blocks per file
(``hash_id_scope: "local"``): equal ids in two files are different blocks.  Such records carry
the file's session id in ``hash_scope``; :class:`HashScopes` maps their ids to ids unique
across files before blocks of several sessions meet in one cache.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .records import (  # (re-exported: the readers' shared record and checks)
    MAX_TEXT_CHARS,
    TraceFormatError,
    TraceRecord,
    _hashes,
    _int,
    _json_lines,
    _lines,
    _num,
    _text,
    open_bytes,
    read_document,
)

MOONCAKE_BLOCK_TOKENS = 512
#: TraceLab records token counts, not blocks: its rounds get block ids of this many tokens
#: (the simulator's default block, so `ttlpolicy compare` reads it as it is).
TRACELAB_BLOCK_TOKENS = 64
#: Sessions of one TraceLab file whose previous round is remembered (a bound on the reader's
#: state: a file interleaving more sessions than this is refused).
TRACELAB_MAX_OPEN_SESSIONS = 100_000


def _agentic_requests(
    path: Path,
    session_id: str,
    requests: Any,
    block_tokens: int,
    offset_s: float,
    where: str,
    scope: str,
    common_tokens: int = 0,
) -> Iterator[TraceRecord]:
    if not isinstance(requests, list):
        raise TraceFormatError(path, where.rstrip(".") or "session", "requests", "must be a list")
    index = 0
    subagents: list[tuple[str, Any, float, str, int]] = []
    for i, req in enumerate(requests):
        rwhere = f"{where}requests[{i}]"
        if not isinstance(req, dict):
            raise TraceFormatError(path, rwhere, "(record)", "must be an object")
        if req.get("type") == "subagent":
            agent = str(req.get("agent_id", f"agent_{i}"))[:MAX_TEXT_CHARS]
            t = _num(path, rwhere, req, "t")
            # a sub-agent has tools and a system prompt of its own (a subset of the tools, its
            # type's prompt): its own shared prefix where it records one, else its parent's
            own = _shared_prefix_tokens(path, rwhere, req)
            subagents.append(
                (
                    f"{session_id}/{agent}",
                    req.get("requests"),
                    offset_s + t,
                    rwhere + ".",
                    common_tokens if own is None else own,
                )
            )
            continue
        yield TraceRecord(
            session_id=session_id,
            index=index,
            arrival_s=offset_s + _num(path, rwhere, req, "t"),
            input_tokens=_int(path, rwhere, req, "in"),
            output_tokens=_int(path, rwhere, req, "out"),
            hash_ids=_hashes(path, rwhere, req),
            block_tokens=block_tokens,
            stop=_text(req.get("stop")),
            think_time_s=_num(path, rwhere, req, "think_time", default=0.0),
            api_time_s=_num(path, rwhere, req, "api_time", default=None),
            hash_scope=scope,
            common_prefix_tokens=common_tokens,
        )
        index += 1
    for sid, reqs, t0, swhere, sub_common in subagents:
        yield from _agentic_requests(path, sid, reqs, block_tokens, t0, swhere, scope, sub_common)


def _shared_prefix_tokens(path: Path, where: str, obj: dict[str, Any]) -> int | None:
    """``tool_tokens + system_tokens`` of a session (or sub-agent) record; None without
    either."""
    fields = [_int(path, where, obj, k) for k in ("tool_tokens", "system_tokens") if k in obj]
    return sum(fields) if fields else None


def read_agentic(path: str | Path) -> Iterator[TraceRecord]:
    """Records of one agentic session file: the main conversation first, then each
    sub-agent's (as its own session)."""
    p = Path(path)
    with open_bytes(p) as f:
        doc = read_document(p, f)
    if not isinstance(doc, dict):
        raise TraceFormatError(p, "session", "(record)", "must be a JSON object")
    session_id = str(doc.get("id", p.name.split(".")[0]))[:MAX_TEXT_CHARS]
    block_tokens = _int(p, "session", doc, "block_size")
    # Only an explicit "global" scope lets ids meet across files.
    scope = "" if doc.get("hash_id_scope") == "global" else session_id
    # the tool definitions and system prompt every session begins with (optional fields)
    common = _shared_prefix_tokens(p, "session", doc) or 0
    yield from _agentic_requests(
        p, session_id, doc.get("requests"), block_tokens, 0.0, "", scope, common
    )


def read_mooncake(path: str | Path) -> Iterator[TraceRecord]:
    """The Mooncake JSONL trace, streamed; arrival is ``timestamp`` / 1000."""
    p = Path(path)
    with open_bytes(p) as f:
        for lineno, where, obj in _json_lines(p, f):
            yield TraceRecord(
                session_id="",
                index=lineno - 1,
                arrival_s=_num(p, where, obj, "timestamp") / 1000.0,
                input_tokens=_int(p, where, obj, "input_length"),
                output_tokens=_int(p, where, obj, "output_length"),
                hash_ids=_hashes(p, where, obj),
                block_tokens=MOONCAKE_BLOCK_TOKENS,
                stop=None,
                think_time_s=0.0,
                api_time_s=None,
            )


def read_azure(path: str | Path) -> Iterator[TraceRecord]:
    """An Azure LLM inference CSV, streamed; arrival in seconds since the first row."""
    p = Path(path)
    t0: datetime | None = None
    with open_bytes(p) as f:
        reader = csv.reader(line for _, line in _lines(p, f))
        rows = _csv_rows(p, reader)
        header = next(rows, None)
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header is None or [h.strip() for h in header] != want:
            raise TraceFormatError(
                p, "line 1", "(header)", f"expected {','.join(want)}, got {header!r}"
            )
        for i, row in enumerate(rows):
            where = f"line {reader.line_num}"
            if len(row) != 3:
                raise TraceFormatError(p, where, "(record)", f"expected 3 columns, got {len(row)}")
            try:
                # Seven fractional digits: datetime takes six.
                ts = datetime.fromisoformat(row[0].strip()[:26])
            except ValueError:
                raise TraceFormatError(
                    p, where, "TIMESTAMP", f"not a timestamp: {row[0]!r}"
                ) from None
            t0 = ts if t0 is None else t0
            if ts < t0:
                raise TraceFormatError(p, where, "TIMESTAMP", f"before the first row: {row[0]!r}")
            fields = {}
            for name, text in zip(want[1:], row[1:], strict=False):
                try:
                    fields[name] = int(text)
                except ValueError:
                    raise TraceFormatError(p, where, name, f"not an integer: {text!r}") from None
                if fields[name] < 0:
                    raise TraceFormatError(p, where, name, f"must be >= 0, got {text!r}")
            yield TraceRecord(
                session_id="",
                index=i,
                arrival_s=(ts - t0).total_seconds(),
                input_tokens=fields["ContextTokens"],
                output_tokens=fields["GeneratedTokens"],
                hash_ids=(),
                block_tokens=0,
                stop=None,
                think_time_s=0.0,
                api_time_s=None,
            )


def _csv_rows(path: Path, reader: Any) -> Iterator[list[str]]:
    """The rows of a ``csv.reader``; a row it refuses (a field over its size limit, an
    unterminated quote) raises TraceFormatError at its line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceFormatError(path, f"line {reader.line_num}", "(csv)", str(e)) from None
        yield row


@dataclass(slots=True)
class _TraceLabSession:
    """What the reader remembers of a session between its rounds."""

    first_issue_s: float
    prev_end_s: float
    prev_ids: tuple[int, ...]
    round_index: int
    next_id: int
    records: int


def _timestamp_s(path: Path, where: str, field: str, v: Any) -> float:
    """An ISO-8601 timestamp ("...Z" allowed) as seconds since the epoch."""
    if not isinstance(v, str) or len(v) > 64:
        raise TraceFormatError(path, where, field, f"must be an ISO-8601 timestamp, got {v!r}")
    try:
        ts = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise TraceFormatError(path, where, field, f"not a timestamp: {v!r}") from None
    if ts.tzinfo is None:
        raise TraceFormatError(path, where, field, f"timestamp without a time zone: {v!r}")
    return ts.timestamp()


def _round_times(path: Path, where: str, obj: dict[str, Any]) -> tuple[float, float]:
    """(issue, end) of a round, s since the epoch: the round is issued when its last input
    (user message or tool result) is ready and ends with its last event."""
    events = obj.get("timing_events")
    if not isinstance(events, list) or not events:
        raise TraceFormatError(path, where, "timing_events", "must be a non-empty list")
    issue_s: float | None = None
    end_s = -math.inf
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise TraceFormatError(path, where, f"timing_events[{i}]", "must be an object")
        t = _timestamp_s(path, where, f"timing_events[{i}].timestamp", ev.get("timestamp"))
        end_s = max(end_s, t)
        if ev.get("event_type") in ("user_message", "tool_result"):
            issue_s = t if issue_s is None else max(issue_s, t)
    if issue_s is None:  # no input event recorded: the round starts with its first event
        issue_s = _timestamp_s(path, where, "timing_events[0].timestamp", events[0]["timestamp"])
    return issue_s, max(end_s, issue_s)


def read_tracelab(path: str | Path) -> Iterator[TraceRecord]:
    """A TraceLab round trace (JSONL, uw-syfi/TraceLab ``round_trace.jsonl``), streamed; each
    session is a program, its rounds in ``round_index`` order (a round out of order is an
    error).

    TraceLab records token counts, not block hashes: a round's ``TRACELAB_BLOCK_TOKENS``-token
    blocks get ids, local to the session, such that its first ``prefix_tokens`` (the tokens
    the provider served from its prefix cache; capped by the previous round's blocks) reuse the
    previous round's ids and the appended tokens get new ones.  A provider's cache can miss a
    prefix it did hold, so the reuse read is the recorded hit, a lower bound on the shared
    context.  Times: a round is issued when its last input event (user message, tool result)
    is ready and ends at its last event; ``think_time_s`` is the gap from the previous round's
    end (tool or human time), ``api_time_s`` the round's own span.  A round that called tools
    has ``stop="tool_use"``, else ``"end_turn"``."""
    p = Path(path)
    bt = TRACELAB_BLOCK_TOKENS
    sessions: dict[str, _TraceLabSession] = {}
    with open_bytes(p) as f:
        for _, where, obj in _json_lines(p, f):
            sid = obj.get("session_id")
            if not isinstance(sid, str) or not sid:
                raise TraceFormatError(
                    p, where, "session_id", f"must be a non-empty string, got {sid!r}"
                )
            sid = sid[:MAX_TEXT_CHARS]
            round_index = _int(p, where, obj, "round_index")
            input_tokens = _int(p, where, obj, "input_tokens_total")
            prefix_tokens = min(_int(p, where, obj, "prefix_tokens"), input_tokens)
            output_tokens = _int(p, where, obj, "output_tokens")
            tools = obj.get("tools", [])
            if not isinstance(tools, list):
                raise TraceFormatError(p, where, "tools", "must be a list")
            issue_s, end_s = _round_times(p, where, obj)
            s = sessions.get(sid)
            if s is None:
                if len(sessions) >= TRACELAB_MAX_OPEN_SESSIONS:
                    raise TraceFormatError(
                        p, where, "session_id", f"more than {TRACELAB_MAX_OPEN_SESSIONS} sessions"
                    )
                s = sessions[sid] = _TraceLabSession(issue_s, issue_s, (), -1, 0, 0)
            elif round_index <= s.round_index:
                raise TraceFormatError(
                    p,
                    where,
                    "round_index",
                    f"{round_index} after round {s.round_index} of session {sid!r} "
                    "(rounds must be in order)",
                )
            shared = min(prefix_tokens // bt, len(s.prev_ids))
            fresh = input_tokens // bt - shared
            if s.next_id + fresh >= 1 << 32:
                raise TraceFormatError(
                    p, where, "input_tokens_total", "session exceeds 2**32 blocks"
                )
            ids = s.prev_ids[:shared] + tuple(range(s.next_id, s.next_id + fresh))
            yield TraceRecord(
                session_id=sid,
                index=s.records,
                arrival_s=issue_s - s.first_issue_s,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                hash_ids=ids,
                block_tokens=bt,
                stop="tool_use" if tools else "end_turn",
                think_time_s=max(0.0, issue_s - s.prev_end_s) if s.records else 0.0,
                api_time_s=end_s - issue_s,
                hash_scope=sid,
            )
            s.prev_ids, s.prev_end_s, s.round_index = ids, end_s, round_index
            s.next_id += fresh
            s.records += 1


def _first_record(path: Path) -> Any:
    """The first JSON record of a JSONL file (None: empty or not JSON), to tell formats apart."""
    try:
        with open_bytes(path) as f:
            for _, line in _lines(path, f):  # (bounded: a line too long is an error)
                if line.strip():
                    return json.loads(line)
    except (ValueError, EOFError, OSError, gzip.BadGzipFile, zlib.error, RecursionError):
        return None  # (TraceFormatError is a ValueError: the reader then says what is wrong)
    return None


#: The folder of the full public traces (docs/simulate.md, "Where the traces come from"); a
#: relative ``--trace`` that is not found from the working folder is looked up under it.
TRACES_ENV = "TTLPOLICY_TRACES"


def resolve_trace(path: str) -> str:
    """``path`` as given when it exists (or is absolute), else ``$TTLPOLICY_TRACES/path`` when
    that exists, else ``path`` unchanged (the reader then says what was looked for)."""
    p = Path(path)
    root = os.environ.get(TRACES_ENV)
    if p.exists() or p.is_absolute() or not root or not (Path(root) / p).exists():
        return path
    return str(Path(root) / p)


def _lookup_note(path: str | Path) -> str:
    if Path(path).is_absolute():
        return ""
    root = os.environ.get(TRACES_ENV)
    if root:
        return f" (nor under {TRACES_ENV}={root!r})"
    return f" ({TRACES_ENV}, where a trace name is also looked up, is not set)"


def detect_format(path: str | Path) -> str:
    """'agentic', 'mooncake', 'tracelab', 'recording' or 'azure', from the file name (a JSONL
    file's first record tells TraceLab and a recording from Mooncake); FileNotFoundError
    when there is no such file (the first thing a mistyped path should be told)."""
    if not Path(path).exists():
        raise FileNotFoundError(
            f"no such trace file or directory: {str(path)!r}{_lookup_note(path)}"
        )
    name = Path(path).name.lower()
    if name.endswith((".csv", ".csv.gz")):
        return "azure"
    if name.endswith((".jsonl", ".jsonl.gz")):
        from .recording import is_recording

        first = _first_record(Path(path))
        if is_recording(first):
            return "recording"
        return "tracelab" if isinstance(first, dict) and "round_index" in first else "mooncake"
    if name.endswith((".json", ".json.gz")):
        return "agentic"
    raise ValueError(
        f"cannot tell the trace format of {str(path)!r}: "
        "expected .json, .jsonl or .csv (optionally .gz)"
    )


def read_trace(path: str | Path) -> Iterator[TraceRecord]:
    """Records of one trace file, or of every session file in a directory (sorted by name;
    recorded traffic last)."""
    from .recording import read_recording  # (it reads with this module's helpers)

    p = Path(path)
    if p.is_dir():
        files = session_files(p)
        for f in files:
            if not f.name.endswith(".jsonl"):
                yield from read_agentic(f)
        # a recording's files are read together: a program's calls span them
        yield from read_recording(f for f in files if f.name.endswith(".jsonl"))
        return
    fmt = detect_format(p)
    readers = {
        "agentic": read_agentic,
        "mooncake": read_mooncake,
        "tracelab": read_tracelab,
        "azure": read_azure,
        "recording": lambda f: read_recording([f]),
    }
    yield from readers[fmt](p)


def session_files(directory: Path) -> list[Path]:
    """The session files of a folder (``*.json[.gz]``), then its recorded traffic
    (``record-*.jsonl``, ``ttlpolicy.serving.record``), each in name order."""
    from .recording import record_files

    files = sorted(x for x in directory.iterdir() if x.name.endswith((".json", ".json.gz")))
    files += record_files(directory)
    if not files:
        raise ValueError(
            f"no session files (*.json, *.json.gz, record-*.jsonl) in {str(directory)!r}"
        )
    return files


#: Formats whose records form agent programs (sessions of several calls); the others are
#: request streams, replayed open loop.
PROGRAM_FORMATS = ("agentic", "tracelab", "recording")


def has_programs(path: str | Path) -> bool:
    """Whether the trace at ``path`` (a file or a session folder) holds agent programs."""
    return Path(path).is_dir() or detect_format(path) in PROGRAM_FORMATS


class HashScopes:
    """Maps block hashes to ids unique across hash scopes: a record's ids pass unchanged when
    its ``hash_scope`` is "" (global ids), else become ``(scope number << 32) | id`` with one
    number per scope, first come first numbered (ids of a scoped trace must be in [0, 2**32))."""

    MAX_SCOPES = 1 << 31

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._scopes: list[str] = []  # by number
        self._global_seen = False

    def hash_ids(self, rec: TraceRecord) -> tuple[int, ...]:
        if not rec.hash_scope:
            self._global_seen = self._global_seen or bool(rec.hash_ids)
            return rec.hash_ids
        n = self._numbers.get(rec.hash_scope)
        if n is None:
            if len(self._numbers) >= self.MAX_SCOPES:
                raise ValueError(f"more than {self.MAX_SCOPES} hash scopes")
            n = self._numbers[rec.hash_scope] = len(self._numbers)
            self._scopes.append(rec.hash_scope)
        base = n << 32
        for h in rec.hash_ids:
            if not 0 <= h < 1 << 32:
                raise ValueError(f"hash id {h!r} of scope {rec.hash_scope!r} is outside [0, 2**32)")
        return tuple(base | h for h in rec.hash_ids)

    def origin(self, hash_id: int) -> tuple[str, int] | None:
        """(scope, id within the scope) of an id made by ``hash_ids``, for people to read; None
        when ids are global (as recorded) or the scopes were mixed with global ids."""
        n = hash_id >> 32
        if self._global_seen or not 0 <= n < len(self._scopes):
            return None
        return self._scopes[n], hash_id & 0xFFFFFFFF


def sample_dir() -> Path:
    """The small sample of agentic sessions shipped in the package (Apache-2.0, LICENSE there)."""
    return Path(__file__).parent.parent / "data" / "sessions"
