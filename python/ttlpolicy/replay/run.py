"""Plays programs against one server: each program a thread that sends its calls in order,
waiting its trace gap (times ``time_scale``) before each; programs arrive at given times
(Poisson, a request stream's recorded times) or keep ``concurrency`` in flight (closed loop).

Bounds: at most ``max_inflight`` programs run at once (a timed arrival waits for a free slot,
and its wait counts in its completion time); a call fails after its client's ``timeout_s``;
the run stops after ``max_errors`` failed calls, after ``duration_s``, or on Ctrl-C — and
reports what it measured either way (``RunResult.stopped`` says why it stopped early).  A
failed call ends its program (its later calls would not be the trace's), counted as failed;
so does anything else a program's thread fails with (error kind ``internal``, logged with its
traceback): a program never ends silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import CallError, Client
from .programs import ReplayProgram
from .prompts import prompt_words

logger = logging.getLogger(__name__)

#: Hard cap on programs in flight (threads).
MAX_INFLIGHT = 1024
#: How long a stopped run waits for its threads to notice, s.
STOP_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class Options:
    model: str
    time_scale: float = 1.0  # multiplies every gap of the trace (0.01: a hundred times faster)
    ids: str = "explicit"  # "explicit": name program, tool and last turn; "none": anonymous
    id_field: str = "vllm_xargs"  # vLLM's field; "custom_params" for SGLang
    ignore_eos: bool = True  # generate the trace's output length (vLLM, SGLang)
    salt: str = "0"  # prompt text depends on it: a new salt, a cold cache
    max_inflight: int = 256
    max_errors: int = 10
    duration_s: float | None = None


@dataclass(slots=True)
class CallResult:
    turn: int
    start_s: float  # since the run's start
    latency_s: float
    ttft_s: float | None
    input_tokens: int  # what the trace asked for
    prompt_tokens: int | None  # what the server counted
    cached_tokens: int | None
    completion_tokens: int | None
    ideal_cached_tokens: int  # the longest prefix, in full blocks, sent by an earlier call
    error: str | None = None  # CallError kind


@dataclass(slots=True)
class ProgramResult:
    program_id: str
    arrival_s: float  # when it was due (since the run's start)
    calls: list[CallResult] = field(default_factory=list)
    end_s: float | None = None  # None: not finished (stopped or failed)
    gaps_s: float = 0.0  # the gaps it waited
    failed: bool = False


@dataclass(slots=True)
class RunResult:
    url: str
    programs: list[ProgramResult]
    wall_s: float
    stopped: str | None  # None, "interrupted", "errors", "duration"
    errors: dict[str, int]


class _Prefixes:
    """Block-hash prefixes already sent (as chained digests): the cache hit a server with
    unbounded memory would give a call, the yardstick for the cached tokens it reports."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def hit_blocks(self, copy: str, hash_ids: Sequence[int], common: int = 0) -> int:
        """Leading blocks of ``hash_ids`` sent before (a copy's text is its own: ``copy``;
        its first ``common`` blocks are the warm prefix's, every copy's)."""
        keys, h = [], hash("\0warm")
        for i, b in enumerate(hash_ids):
            h = hash((h, i)) if i < common else hash((h, copy, b))
            keys.append(h)
        with self._lock:
            k = 0
            while k < len(keys) and keys[k] in self._seen:
                k += 1
            self._seen.update(keys)
        return k


class Replay:
    """One run against one server (``run`` may be called once)."""

    def __init__(
        self,
        client: Client,
        options: Options,
        progress: Callable[[RunResult], None] | None = None,
    ) -> None:
        if not 1 <= options.max_inflight <= MAX_INFLIGHT:
            raise ValueError(
                f"max_inflight must be in [1, {MAX_INFLIGHT}], got {options.max_inflight}"
            )
        self.client, self.opt, self.progress = client, options, progress
        self.stop = threading.Event()
        self._slots = threading.Semaphore(options.max_inflight)
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._results: list[ProgramResult] = []
        self._prefixes = _Prefixes()
        self._stopped: str | None = None
        self._t0 = 0.0

    # ---- one program ----------------------------------------------------------------------

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def _prompt(
        self, copy: str, hash_ids: Sequence[int], tokens: int, block_tokens: int, key: str,
        common_blocks: int,
    ) -> str:  # fmt: skip
        """A prompt's text: a copy's own (``copy``), its warm prefix every copy's."""
        words = prompt_words(
            self.opt.salt + copy, hash_ids, tokens, block_tokens, key,
            common_blocks=common_blocks, common_salt=self.opt.salt,
        )  # fmt: skip
        return "".join(words)

    def _body(self, p: ReplayProgram, i: int, copy: str) -> dict[str, Any]:
        c = p.calls[i]
        key = f"{copy}{p.program_id}\0{i}"
        body: dict[str, Any] = {
            "model": self.opt.model,
            "prompt": self._prompt(
                copy, c.hash_ids, c.input_tokens, p.block_tokens, key, c.common_blocks
            ),
            "max_tokens": max(1, c.output_tokens),
            "temperature": 0.0,
        }
        if self.opt.ignore_eos:
            body["ignore_eos"] = True
        if self.opt.ids == "explicit":
            ident: dict[str, Any] = {
                "program_id": copy + p.program_id,
                "last_turn": i == len(p.calls) - 1,
            }
            if c.tool:
                ident["tool"] = c.tool
            body[self.opt.id_field] = ident
        return body

    def _play(self, p: ReplayProgram, res: ProgramResult, copy: str) -> None:
        try:
            self._play_calls(p, res, copy)
        except Exception:  # (a bug, a reply no check foresaw): the program failed, counted
            logger.exception("ttlpolicy replay: program %s failed", res.program_id)
            res.failed, res.end_s = True, None
            self._count_error("internal")
        finally:
            self._slots.release()

    def _play_calls(self, p: ReplayProgram, res: ProgramResult, copy: str) -> None:
        for i, c in enumerate(p.calls):
            gap = c.think_s * self.opt.time_scale if i else 0.0
            if gap > 0 and self.stop.wait(gap):
                return
            if self.stop.is_set():
                return
            res.gaps_s += gap
            hit = self._prefixes.hit_blocks(copy, c.hash_ids, c.common_blocks)
            ideal = hit * p.block_tokens
            start = self._now()
            try:
                out = self.client.complete(self._body(p, i, copy))
            except CallError as e:
                if e.kind == "cancelled":
                    return
                failed = CallResult(
                    i, start, self._now() - start, None, c.input_tokens, None, None, None,
                    ideal, error=e.kind,
                )  # fmt: skip
                res.calls.append(failed)
                res.failed = True
                self._count_error(e.kind)
                return
            res.calls.append(
                CallResult(
                    i, start, out.latency_s, out.ttft_s, c.input_tokens, out.prompt_tokens,
                    out.cached_tokens, out.completion_tokens, ideal,
                )
            )  # fmt: skip
        res.end_s = self._now()

    def _count_error(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1
            if sum(self._errors.values()) >= self.opt.max_errors and self._stopped is None:
                self._stopped = "errors"
                self.stop.set()

    def _start(self, p: ReplayProgram, arrival_s: float, copy: str = "") -> threading.Thread:
        res = ProgramResult(copy + p.program_id, arrival_s)
        with self._lock:
            self._results.append(res)
        t = threading.Thread(target=self._play, args=(p, res, copy), daemon=True)
        t.start()
        return t

    def _acquire(self) -> bool:
        """A free program slot; False when the run stops first."""
        while not self.stop.is_set():
            if self._slots.acquire(timeout=0.2):
                return True
            self._tick()
        return False

    # ---- the run --------------------------------------------------------------------------

    def warm_up(self, blocks: int, block_tokens: int) -> CallResult | None:
        """Send the warm shared prefix (``blocks`` blocks; every call that begins with it then
        finds it cached) once, anonymous, before the run; not counted in the run's results.
        A failed warm-up is counted as an error (kind ``warm-up:<kind>``); the run goes on."""
        if blocks <= 0:
            return None
        n = blocks * block_tokens
        ids = range(blocks)
        body = {
            "model": self.opt.model,
            "prompt": self._prompt("", ids, n, block_tokens, "", blocks),
            "max_tokens": 1,
            "temperature": 0.0,
        }  # fmt: skip
        self._prefixes.hit_blocks("", ids, blocks)
        start = time.perf_counter()
        try:
            out = self.client.complete(body)
        except CallError as e:
            self._count_error(f"warm-up:{e.kind}")
            return CallResult(-1, 0.0, time.perf_counter() - start, None, n, None, None, None,
                              0, error=e.kind)  # fmt: skip
        return CallResult(
            -1, 0.0, out.latency_s, out.ttft_s, n, out.prompt_tokens, out.cached_tokens,
            out.completion_tokens, 0,
        )  # fmt: skip

    def _tick(self) -> None:
        if self.opt.duration_s is not None and self._now() >= self.opt.duration_s:
            with self._lock:
                self._stopped = self._stopped or "duration"
            self.stop.set()
        if self.progress is not None:
            self.progress(self.snapshot())

    def _wait_until(self, t_s: float) -> bool:
        """Sleep until ``t_s`` (since the start), ticking; False when stopped first."""
        while not self.stop.is_set():
            left = t_s - self._now()
            if left <= 0:
                return True
            self.stop.wait(min(left, 0.2))
            self._tick()
        return False

    def snapshot(self) -> RunResult:
        with self._lock:
            return RunResult(
                self.client.url, list(self._results), self._now(), self._stopped, dict(self._errors)
            )

    def run_timed(self, arrivals: Iterable[tuple[float, ReplayProgram]]) -> RunResult:
        """Programs started at their arrival times (s since the start)."""
        return self._run(lambda threads: self._feed_timed(arrivals, threads))

    def _feed_timed(self, arrivals: Iterable[tuple[float, ReplayProgram]], threads: list) -> None:
        for t, p in arrivals:
            if not self._wait_until(t) or not self._acquire():
                return
            threads.append(self._start(p, t))

    def run_closed(
        self, next_program: Callable[[], tuple[ReplayProgram, str] | None], n: int
    ) -> RunResult:
        """``n`` programs in flight: each time one ends, ``next_program()`` (program, copy
        prefix) starts, until it returns None."""
        if not 1 <= n <= self.opt.max_inflight:
            raise ValueError(
                f"concurrency must be in [1, {self.opt.max_inflight}] (max_inflight), got {n}"
            )
        self._slots = threading.Semaphore(n)
        return self._run(lambda threads: self._feed_closed(next_program, threads))

    def _feed_closed(
        self, next_program: Callable[[], tuple[ReplayProgram, str] | None], threads: list
    ) -> None:
        while self._acquire():
            item = next_program()
            if item is None:
                self._slots.release()
                return
            threads.append(self._start(item[0], self._now(), item[1]))
            self._tick()

    def _run(self, feed: Callable[[list], None]) -> RunResult:
        self._t0 = time.perf_counter()
        threads: list[threading.Thread] = []
        try:
            feed(threads)
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
                    self._tick()
        except KeyboardInterrupt:
            with self._lock:
                self._stopped = "interrupted"
        finally:
            self.stop.set()
            self.client.cancel_all()
            end = time.monotonic() + STOP_GRACE_S
            for t in threads:
                t.join(max(0.0, end - time.monotonic()))
        return self.snapshot()
