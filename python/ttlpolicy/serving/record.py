"""Recording the calls an engine serves, as sessions the simulator reads (``TTLPOLICY_RECORD``).

An adapter hands each finished call to a :class:`Recorder`; the recorder writes one JSON line
per call into rotating files ``record-<UTC start, ns>-<recording>-<n>.jsonl`` of a directory, which
``ttlpolicy compare --trace DIR`` and ``ttlpolicy replay --trace DIR`` read as agent programs
(``ttlpolicy.traces.recording``).  The format, and why it is not the agentic session format:
docs/record.md.

No content is written: the program and tenant are keyed BLAKE2 digests of the ids the adapter
already computes (equal within a recording, unlinkable across recordings), and each block is a
keyed 64-bit BLAKE2 of the engine's block hash, under a secret key drawn per recording and never
written, so equal blocks stay equal within a recording and nothing is reversible.

Engines chain their block hashes (a block's hash covers its whole prefix), so a block of
``RECORD_BLOCK_TOKENS`` tokens (the simulator's block) is named by the hash of its last engine
block: an engine block that divides it is recorded at the simulator's granularity.

Cheap: ``call`` appends a tuple to a buffer (the hashes are not even copied); the digests, the
JSON and the write happen for a batch, every ``batch_calls`` calls or ``flush_interval_s``, in
a writer thread (``background``; the engine's thread mostly waits on the accelerator, with
the GIL released).  A program's call reuses the digests of its previous call's blocks.
Cheaper still: a recorder made with ``unpack`` takes ``add(entry, finish_s)``, ``entry`` the
references an adapter has at hand, and derives the call's fields from it (``unpack``: the
tenant key, the counts) in the writer thread; ``entry`` must hold nothing the engine will
change, and holds its references alive until written (at most ``MAX_BUFFERED_CALLS``);
``unpack`` returns None for an entry not to record (an aborted call, told in the writer).
What is buffered is bounded in calls (``MAX_BUFFERED_CALLS``) and in the bytes they hold
alive (``MAX_BUFFERED_BYTES``, the bulk of a call's memory: ``add``'s ``held_bytes``), the
batch being written included; a call past either bound is dropped and counted.
Cheapest: an adapter appends such entries to a background recorder's ``buffer`` itself while
it holds fewer than ``batch_calls`` (no call: the writer thread wakes by itself each
``flush_interval_s``), and hands the next to ``add`` (which wakes the writer and keeps the
bound).
Bounded: a recording keeps at most ``max_files`` files of at most ``max_bytes / max_files``
bytes each, its oldest removed first; a rotation also removes the oldest files of ended
recordings (earlier runs: no live recorder holds their newest file's lock) to keep the folder
within ``max_files``, and never a live recording's file (recorders of several processes may
share a folder: each live one keeps its own ``max_files``).  A call whose line alone exceeds
a file's bound is dropped and counted.

Whole lines only: a batch is written with ``os.write``; a write that fails (disk full) is cut
back to the file's last whole line and its calls are dropped and counted, so later batches
land as whole lines.  A call whose values the reader would refuse (nan, a negative time or
count, a count that is not an integer) is dropped and counted, never written.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

try:  # a live recording's newest file is locked: rotations elsewhere leave it alone
    import fcntl
except ImportError:  # (not POSIX: no locks; other recordings' files are never removed)
    fcntl = None  # type: ignore[assignment]

from ..traces.recording import (
    RECORD_FORMAT,
    RECORD_PREFIX,
    RECORD_SUFFIX,
    RECORD_VERSION,
    record_files,
)
from ..traces.records import count_problem, time_problem

#: The simulator's block, in tokens: what block hashes are recorded at when the engine's
#: block divides it.
RECORD_BLOCK_TOKENS = 64
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_FILES = 16
#: The smallest file bound: a file must hold a header and a long call.
MIN_FILE_BYTES = 1 << 16
#: Calls buffered before they are written (also written every ``flush_interval_s``).
DEFAULT_BATCH_CALLS = 256
DEFAULT_FLUSH_INTERVAL_S = 1.0
#: Calls buffered at most: a call past it is dropped (a write that keeps failing).
MAX_BUFFERED_CALLS = 1 << 16
#: Bytes buffered calls hold alive at most, as their adapters estimate them (the batch being
#: written included): a call past it is dropped.  A call holds its request's block hashes
#: (vLLM: ~84 B each with the list) or token ids (SGLang) alive until written.
MAX_BUFFERED_BYTES = 1 << 28
#: What ``call`` charges a call per prompt token: a token id (a Python int in a list, ~36 B),
#: the most an entry keeps alive per token (SGLang's entries keep the prompt's ids).
HELD_BYTES_PER_TOKEN = 36
#: A call's prompt is charged at most this many tokens (over any model's context).
MAX_HELD_TOKENS = 1 << 22
_DIGEST_BYTES = 8
logger = logging.getLogger(__name__)
_HEADER_MAX_BYTES = 256  # a file's header line is shorter
#: Program and tenant digests remembered (cleared when full), and programs whose last call's
#: block ids are remembered (the oldest forgotten first): bounded memory.
_MAX_REMEMBERED = 1 << 16
_MAX_REMEMBERED_PROGRAMS = 256


class _Call(NamedTuple):
    """A call as ``Recorder.call`` buffers it (see there)."""

    program_id: str | None
    tenant: str | None
    arrival_s: float
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    block_hashes: Sequence[Any]
    tool: str | None
    last_turn: bool


@dataclass(frozen=True, slots=True)
class RecordSettings:
    """Where and how much to record (``TTLPOLICY_RECORD``, ``TTLPOLICY_RECORD_MAX_BYTES``,
    ``TTLPOLICY_RECORD_FILES``; ``ttlpolicy.serving.knobs.record_from_env``)."""

    directory: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    max_files: int = DEFAULT_MAX_FILES

    def __post_init__(self) -> None:
        if not isinstance(self.max_files, int) or not 1 <= self.max_files <= 1_000_000:
            raise ValueError(
                f"max_files must be an integer in [1, 1000000], got {self.max_files!r}"
            )
        if not isinstance(self.max_bytes, int) or self.max_bytes < self.max_files * MIN_FILE_BYTES:
            raise ValueError(
                f"max_bytes must be an integer >= max_files × {MIN_FILE_BYTES} "
                f"({self.max_files * MIN_FILE_BYTES}), got {self.max_bytes!r}"
            )

    @property
    def file_bytes(self) -> int:
        return self.max_bytes // self.max_files


class Recorder:
    """Writes the calls an adapter reports (``call``) as recorded sessions; see the module."""

    def __init__(
        self,
        settings: RecordSettings,
        *,
        engine_block_tokens: int,
        clock: Callable[[], float] = time.monotonic,
        batch_calls: int = DEFAULT_BATCH_CALLS,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        key: bytes | None = None,
        background: bool = True,
        unpack: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None,
    ) -> None:
        if engine_block_tokens < 1:
            raise ValueError(f"engine_block_tokens must be >= 1, got {engine_block_tokens!r}")
        self.settings = settings
        self.clock = clock
        # what ``add``'s entries are turned into a call's fields by, in the writer (``call``'s
        # entries are those fields already)
        self._unpack = unpack
        self.batch_calls, self.flush_interval_s = batch_calls, flush_interval_s
        # engine blocks per recorded block: the hash of every ``_stride``-th names it
        fits = RECORD_BLOCK_TOKENS % engine_block_tokens == 0
        self._stride = RECORD_BLOCK_TOKENS // engine_block_tokens if fits else 1
        self.block_tokens = RECORD_BLOCK_TOKENS if fits else engine_block_tokens
        # the per-recording secret: never written; a prepared keyed BLAKE2 is copied per digest
        self._keyed = hashlib.blake2b(
            digest_size=_DIGEST_BYTES, key=key if key is not None else secrets.token_bytes(32)
        )
        self._ids: dict[str, str] = {}  # program / tenant id -> its digest
        # program -> (its last call's recorded engine hashes, their ids)
        self._last: dict[str, tuple[list[Any], list[str]]] = {}
        self.recording = secrets.token_hex(4)
        # the names sort by start time (ns), so the oldest file is the first by name
        ns = time.time_ns()
        self._started = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns // 10**9)) + (
            f"{ns % 10**9:09d}"
        )
        # calls not written yet: appended by ``add`` (or by an adapter's hot path directly,
        # below ``batch_calls`` entries: the writer wakes by itself each ``flush_interval_s``),
        # taken by the writer (deque: both ends are safe from two threads)
        self.buffer: deque[tuple[Any, ...]] = deque()
        self._last_flush_s = clock()
        self._write_lock = threading.Lock()  # one writer at a time (thread, flush, close)
        self._fd: int | None = None  # the open file (a raw fd: a failed write is cut back)
        self._file_bytes = 0  # whole lines in it, bytes (where a failed write is cut back to)
        # bytes buffered calls hold: added by the caller's thread, released by the writer
        # once their batch is done (one writer each: no lock on the hot path)
        self._held_in = 0
        self._held_out = 0
        self._files = 0
        # what it did (ttl_stats / the bench read them)
        self.calls_recorded = 0
        self.calls_dropped = 0
        self.bytes_written = 0
        self.files_removed = 0
        self.writer_s = 0.0  # time spent digesting and writing batches (in either thread), s
        self.writer_cpu_s = 0.0  # ... the CPU time of the thread that did it, s
        settings.directory.mkdir(parents=True, exist_ok=True)
        self._closed = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if background:  # digests and writes off the caller's thread
            self._thread = threading.Thread(
                target=self._writer, name="ttlpolicy-record", daemon=True
            )
            self._thread.start()
        atexit.register(self.close)

    # -- the hot path ------------------------------------------------------------------------
    def call(
        self,
        *,
        program_id: str | None,
        tenant: str | None,
        arrival_s: float,
        finish_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        block_hashes: Sequence[Any],
        tool: str | None,
        last_turn: bool = False,
    ) -> None:
        """A finished call: its program (None: anonymous, a one-call program) and tenant as
        the adapter keys them, times on the recorder's clock, token counts, and the engine's
        block hashes (bytes or int; chained) of its prompt's full blocks.  (The caller
        times it: a clock reading here would be a good part of its cost.)  For a recorder
        made without ``unpack``."""
        self.add(
            (
                program_id,
                tenant,
                arrival_s,
                finish_s,
                prompt_tokens,
                output_tokens,
                cached_tokens,
                block_hashes,
                tool,
                last_turn,
            ),
            finish_s,
            _held_bytes(prompt_tokens),
        )

    def add(self, entry: tuple[Any, ...], finish_s: float, held_bytes: int = 0) -> None:
        """Buffer a finished call (at ``finish_s``, the recorder's clock): ``entry`` is its
        fields in ``call``'s order (a plain tuple: a NamedTuple's construction was a third
        of ``call``'s time, bench/record_overhead.py) or, for a recorder made with
        ``unpack``, what ``unpack`` turns into them in the writer thread; ``held_bytes``: what
        it keeps alive until written, estimated (its block hashes or token ids).  A call past
        ``MAX_BUFFERED_CALLS`` buffered, or past ``MAX_BUFFERED_BYTES`` held, is dropped and
        counted."""
        buffer = self.buffer
        buffered = len(buffer)
        held = self._held_in - self._held_out
        if buffered >= MAX_BUFFERED_CALLS or (
            held_bytes and held + held_bytes > MAX_BUFFERED_BYTES
        ):
            self.calls_dropped += 1
            return
        self._held_in += held_bytes
        buffer.append(entry)
        if buffered + 1 >= self.batch_calls or self._flush_due(finish_s):
            if time_problem(finish_s) is None:  # (a time the writer refuses moves nothing)
                self._last_flush_s = finish_s
            if self._thread is not None:
                self._wake.set()
            else:
                self.flush()

    def _flush_due(self, finish_s: Any) -> bool:
        """Whether ``flush_interval_s`` has passed by ``finish_s`` (a time the writer will
        refuse is never due: it neither raises here nor moves the last flush's time)."""
        try:
            return bool(finish_s - self._last_flush_s >= self.flush_interval_s) and (
                time_problem(finish_s) is None
            )
        except (TypeError, OverflowError):
            return False

    # -- writing -----------------------------------------------------------------------------
    def _writer(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is buffered.  A batch that fails (disk full) is dropped, counted and
        logged: recording never fails the engine."""
        if not self.buffer:  # (the writer also wakes each flush_interval_s: idle, nothing)
            return
        with self._write_lock:
            t0, cpu0 = time.perf_counter(), time.thread_time()
            # read before the batch is taken: its calls' bytes are released when it is done
            # (a call added meanwhile is released with the next batch: over-counted, never
            # under)
            held_in = self._held_in
            try:
                self._write_batch()
            except Exception as e:  # (disk full, a bad value): the batch is lost, not the engine
                logger.warning(
                    "ttlpolicy: recording into %s failed: %s", self.settings.directory, e
                )
            finally:
                self._held_out = held_in
            self.writer_cpu_s += time.thread_time() - cpu0
            self.writer_s += time.perf_counter() - t0

    def close(self) -> None:
        """Write what is buffered and close the file (idempotent)."""
        self._closed = True
        if self._thread is not None:
            self._wake.set()
            self._thread.join()
            self._thread = None
        self.flush()
        with self._write_lock:
            self._close_file()
        atexit.unregister(self.close)

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # (its lock goes with it: the recording may be removed now)

    def _id(self, text: str) -> str:
        """The keyed digest of a program or tenant id (remembered: they recur)."""
        got = self._ids.get(text)
        if got is None:
            if len(self._ids) >= _MAX_REMEMBERED:
                self._ids.clear()
            d = self._keyed.copy()
            d.update(text.encode("utf-8", "surrogatepass"))
            got = self._ids[text] = d.hexdigest()
        return got

    def _block_ids(self, program: str | None, hashes: Sequence[Any], prompt_tokens: int) -> str:
        """The recorded block ids of a prompt, as JSON list items.  A program's call begins
        with its previous call's blocks: their digests are taken from that call (the first
        block that differs is found by bisection: chained hashes that differ once differ
        from there on), the rest digested."""
        s = self._stride
        engine_blocks = min(len(hashes), prompt_tokens * s // self.block_tokens)
        blocks = list(hashes[s - 1 : engine_blocks : s])
        prev_blocks, prev_ids = self._last.pop(program, ((), [])) if program else ((), [])
        lo, hi = 0, min(len(blocks), len(prev_blocks))
        while lo < hi:  # the length of the common prefix
            mid = (lo + hi + 1) // 2
            if blocks[mid - 1] == prev_blocks[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        ids = prev_ids[:lo]
        keyed, from_bytes = self._keyed, int.from_bytes
        for h in blocks[lo:]:
            if not isinstance(h, bytes):
                h = h.to_bytes(32, "big", signed=True) if isinstance(h, int) else repr(h).encode()
            d = keyed.copy()
            d.update(h)
            ids.append(str(from_bytes(d.digest(), "big", signed=True)))
        if program:
            if len(self._last) >= _MAX_REMEMBERED_PROGRAMS:
                self._last.pop(next(iter(self._last)))
            self._last[program] = (blocks, ids)
        return ",".join(ids)

    def _line(self, c: _Call) -> bytes:
        # written by hand (json.dumps was most of a line's cost): numbers, hex digests, and
        # the tool, the one free text, through json.dumps; values the reader would refuse
        # are refused here (the call is dropped), never written
        _check_call(c)
        program = "null" if c.program_id is None else f'"{self._id(c.program_id)}"'
        tenant = "null" if c.tenant is None else f'"{self._id(c.tenant)}"'
        return (
            f'{{"t":{c.arrival_s:.6f},"end":{max(c.finish_s, c.arrival_s):.6f},'
            f'"program":{program},"tenant":{tenant},'
            f'"in":{int(c.prompt_tokens)},"out":{int(c.output_tokens)},'
            f'"cached":{int(c.cached_tokens)},"tool":{json.dumps(c.tool)},'
            f'"last":{"true" if c.last_turn else "false"},'
            f'"hash_ids":[{self._block_ids(c.program_id, c.block_hashes, c.prompt_tokens)}]}}\n'
        ).encode()

    def _header(self) -> bytes:
        obj = {
            "format": RECORD_FORMAT,
            "version": RECORD_VERSION,
            "recording": self.recording,
            "block_size": self.block_tokens,
            # the clock's reading at the Unix epoch: times + this = Unix time, s
            "clock_unix_offset_s": round(time.time() - self.clock(), 6),
        }
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode()

    def _write_batch(self) -> None:
        buffer, entries = self.buffer, []
        while buffer:
            entries.append(buffer.popleft())
        if not entries:
            return
        limit = self.settings.file_bytes
        pending: list[bytes] = []
        pending_bytes = 0  # (the file holds ``_file_bytes``; these go after them)
        self.calls_dropped += len(entries)  # (until written)
        unpack, failed = self._unpack, None
        for entry in entries:
            try:
                fields = entry if unpack is None else unpack(entry)
                if fields is None:  # not a call to record (``unpack`` said so)
                    self.calls_dropped -= 1
                    continue
                line = self._line(_Call._make(fields))
            except Exception as e:  # (a bad value): that call is lost, not the batch
                failed = e
                continue
            if len(line) + _HEADER_MAX_BYTES > limit:
                continue
            if self._fd is None or self._file_bytes + pending_bytes + len(line) > limit:
                self._write(pending)
                pending, pending_bytes = [], 0
                self._rotate()
            pending.append(line)
            pending_bytes += len(line)
        self._write(pending)
        if failed is not None:
            raise ValueError(f"a call could not be recorded: {failed}") from failed

    def _write(self, lines: list[bytes]) -> None:
        """Append ``lines`` (calls) to the open file; counted as recorded once written.  A
        write that fails leaves the file at its last whole line (the calls stay dropped)."""
        if lines and self._fd is not None:
            data = b"".join(lines)
            self._append(data)
            self.bytes_written += len(data)
            self.calls_recorded += len(lines)
            self.calls_dropped -= len(lines)

    def _append(self, data: bytes) -> None:
        """Write ``data`` whole at the end of the open file, or raise with the file cut back
        to its previous end: a torn line would make the file unreadable past it."""
        fd = self._fd
        assert fd is not None
        view, done = memoryview(data), 0
        try:
            while done < len(data):  # (a short write: the disk filled part-way)
                done += os.write(fd, view[done:])
        except BaseException:
            try:
                os.ftruncate(fd, self._file_bytes)
                os.lseek(fd, self._file_bytes, os.SEEK_SET)
            except OSError:  # cannot cut it back: the torn line stays last in a closed file
                self._close_file()
            raise
        self._file_bytes += len(data)

    def _rotate(self) -> None:
        """Remove the oldest files of this recording beyond the count and of ended recordings
        beyond the folder's count, open the next file (locked: this recording is live), close
        the current one."""
        self._files += 1
        name = f"{RECORD_PREFIX}{self._started}-{self.recording}-{self._files:06d}{RECORD_SUFFIX}"
        directory = self.settings.directory
        existing = record_files(directory)
        own = [f for f in existing if _recording_of(f) == self.recording]
        # this recording's oldest beyond its count (its current file will be closed: counted),
        # then ended recordings' oldest while the folder is over its count
        doomed = own[: max(0, len(own) + 1 - self.settings.max_files)]
        over = len(existing) - len(doomed) + 1 - self.settings.max_files
        doomed += _ended_recordings_files(existing, self.recording, directory)[: max(0, over)]
        for old in doomed:
            old.unlink(missing_ok=True)
            self.files_removed += 1
        try:
            # locked before it is named as a recording file, and the current one closed
            # after: at every instant a live recording's newest file is locked
            fd, tmp = _open_locked(directory, name)
            try:
                os.rename(tmp, directory / name)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
        finally:
            self._close_file()  # (also when the open failed: never written to again)
        self._fd, self._file_bytes = fd, 0
        header = self._header()
        try:
            self._append(header)
        except BaseException:  # a file without its header is unreadable: not kept
            self._close_file()
            (directory / name).unlink(missing_ok=True)
            raise
        self.bytes_written += len(header)

    def stats(self) -> dict[str, float]:
        return {
            "record_calls": float(self.calls_recorded),
            "record_calls_dropped": float(self.calls_dropped),
            "record_bytes_written": float(self.bytes_written),
            "record_files_removed": float(self.files_removed),
            "record_writer_s": self.writer_s,
            "record_writer_cpu_s": self.writer_cpu_s,
        }


def _recording_of(path: Path) -> str:
    """The recording a file belongs to (``record-<start>-<recording>-<n>.jsonl``; "" when the
    name is not one the recorder writes)."""
    parts = path.name[len(RECORD_PREFIX) : -len(RECORD_SUFFIX)].split("-")
    return parts[1] if len(parts) == 3 else ""


def _ended_recordings_files(files: list[Path], own: str, directory: Path) -> list[Path]:
    """The files (oldest first) of the recordings other than ``own`` that no live recorder
    writes: the newest file of a live one is locked (``Recorder._rotate``).  Without locks
    (not POSIX) none: another recording's file is never removed then."""
    if fcntl is None:
        return []
    newest = _newest_by_recording(files, own)
    unlocked = {rec: f for rec, f in newest.items() if not (rec and _locked(f))}
    if not unlocked:
        return []
    # A recorder that rotated after ``files`` were listed unlocked the file it left: its
    # newer one (renamed into place, locked, before the old was closed) shows in a listing
    # taken after the probe, so a recording whose newest file has changed is live.
    now = _newest_by_recording(record_files(directory), own)
    ended = {rec for rec, f in unlocked.items() if now.get(rec, f) == f}
    return sorted(f for f in files if _recording_of(f) in ended and _recording_of(f) != own)


def _newest_by_recording(files: list[Path], own: str) -> dict[str, Path]:
    """Each recording's newest file (names sort in writing order), but ``own``'s."""
    newest: dict[str, Path] = {}
    for f in files:
        rec = _recording_of(f)
        if rec != own:
            newest[rec] = f
    return newest


def _open_locked(directory: Path, name: str) -> tuple[int, Path]:
    """A new file under a temporary name (not a recording file's), locked."""
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    if fcntl is not None:
        # (a filesystem without locks fails this: ``_locked`` then sees every file locked)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd, tmp


def _locked(path: Path) -> bool:
    """Whether a recorder holds ``path``'s lock (it is writing it); True where the filesystem
    has no locks (nothing can be told: kept)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # (gone meanwhile: nothing to protect)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (releases the probe's lock)
    return False


def _held_bytes(prompt_tokens: Any) -> int:
    """What a call of ``prompt_tokens`` holds until written, estimated: an int whatever the
    engine handed (a count the writer will refuse holds nothing; no call holds more than
    ``MAX_HELD_TOKENS``' worth), so that neither a ``TypeError`` reaches the engine nor a NaN
    turns the buffer's byte bound off."""
    if count_problem(prompt_tokens) is not None:
        return 0
    return min(int(prompt_tokens), MAX_HELD_TOKENS) * HELD_BYTES_PER_TOKEN


def _check_call(c: _Call) -> None:
    """Refuse (ValueError naming the field and value) what the reader would refuse, by the
    reader's own rules: times (``time_problem``: finite numbers >= 0) and counts
    (``count_problem``: integers >= 0)."""
    for field, v in (("arrival_s", c.arrival_s), ("finish_s", c.finish_s)):
        problem = time_problem(v)
        if problem is not None:
            raise ValueError(f"{field} {problem}")
    for field, n in (
        ("prompt_tokens", c.prompt_tokens),
        ("output_tokens", c.output_tokens),
        ("cached_tokens", c.cached_tokens),
    ):
        problem = count_problem(n)
        if problem is not None:
            raise ValueError(f"{field} {problem}")
