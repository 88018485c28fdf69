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
Cheapest: an adapter appends such entries to a background recorder's ``buffer`` itself while
it holds fewer than ``batch_calls`` (no call: the writer thread wakes by itself each
``flush_interval_s``), and hands the next to ``add`` (which wakes the writer and keeps the
bound).
Bounded: at most ``max_files`` files of at most ``max_bytes / max_files`` bytes each in the
directory (recordings before this one included); the oldest file is removed first.  A call
whose line alone exceeds a file's bound is dropped and counted.
"""

from __future__ import annotations

import atexit
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
from typing import Any, BinaryIO, NamedTuple

from ..traces.recording import (
    RECORD_FORMAT,
    RECORD_PREFIX,
    RECORD_SUFFIX,
    RECORD_VERSION,
    record_files,
)

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
        self._file: BinaryIO | None = None
        self._file_bytes = 0
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
        )

    def add(self, entry: tuple[Any, ...], finish_s: float) -> None:
        """Buffer a finished call (at ``finish_s``, the recorder's clock): ``entry`` is its
        fields in ``call``'s order (a plain tuple: a NamedTuple's construction was a third
        of ``call``'s time, bench/record_overhead.py) or, for a recorder made with
        ``unpack``, what ``unpack`` turns into them in the writer thread.  A call past
        ``MAX_BUFFERED_CALLS`` buffered is dropped and counted."""
        buffer = self.buffer
        buffered = len(buffer)
        if buffered >= MAX_BUFFERED_CALLS:
            self.calls_dropped += 1
            return
        buffer.append(entry)
        if (
            buffered + 1 >= self.batch_calls
            or finish_s - self._last_flush_s >= self.flush_interval_s
        ):
            self._last_flush_s = finish_s
            if self._thread is not None:
                self._wake.set()
            else:
                self.flush()

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
            try:
                self._write_batch()
            except Exception as e:  # (disk full, a bad value): the batch is lost, not the engine
                logger.warning(
                    "ttlpolicy: recording into %s failed: %s", self.settings.directory, e
                )
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
            if self._file is not None:
                self._file.close()
                self._file = None
        atexit.unregister(self.close)

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
        # the tool, the one free text, through json.dumps
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
            if self._file is None or self._file_bytes + len(line) > limit:
                self._write(pending)
                pending = []
                self._rotate()
            pending.append(line)
            self._file_bytes += len(line)
        self._write(pending)
        if failed is not None:
            raise ValueError(f"a call could not be recorded: {failed}") from failed

    def _write(self, lines: list[bytes]) -> None:
        """Append ``lines`` (calls) to the open file; counted as recorded once written."""
        if lines and self._file is not None:
            data = b"".join(lines)
            self._file.write(data)
            self._file.flush()
            self.bytes_written += len(data)
            self.calls_recorded += len(lines)
            self.calls_dropped -= len(lines)

    def _rotate(self) -> None:
        """Close the current file, remove the oldest beyond the count, open the next."""
        if self._file is not None:
            self._file.close()
        self._files += 1
        name = f"{RECORD_PREFIX}{self._started}-{self.recording}-{self._files:06d}{RECORD_SUFFIX}"
        existing = record_files(self.settings.directory)
        for old in existing[: max(0, len(existing) + 1 - self.settings.max_files)]:
            old.unlink(missing_ok=True)
            self.files_removed += 1
        path = self.settings.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "wb")
        header = self._header()
        self._file.write(header)
        self._file_bytes = len(header)
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
