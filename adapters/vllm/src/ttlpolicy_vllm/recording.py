"""Recording vLLM's traffic as sessions the simulator reads (``TTLPOLICY_RECORD=DIR``).

``CallLog`` hands each call that finished on its own to the library's recorder
(``ttlpolicy.serving.record``: the format, the keyed hashes, the rotation); ``TTLScheduler``
keeps one when the knob is set.  ``RecordingScheduler`` is stock vLLM scheduling plus the
recorder (``scheduler_cls="ttlpolicy_vllm.RecordingScheduler"``), to record traffic before
switching to ``TTLScheduler``.  Aborted calls are not recorded (the simulator has no aborts).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ttlpolicy.ids import Tenancy
from ttlpolicy.serving import Recorder, RecordSettings
from ttlpolicy.serving.knobs import record_from_env, tenancy_from_env

from .compat import AsyncScheduler, Request, RequestStatus, Scheduler
from .identity import ProgramInfo, program_of

#: Bytes a request's block hash keeps alive while its call waits to be written: vLLM's
#: 32-byte hash object and its slot in the list (the recorder's buffer is bounded in these).
HASH_HELD_BYTES = 84
#: Statuses of a call that ended on its own (recorded); the others are aborts.
_STOPPED = (
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH_CAPPED,
    RequestStatus.FINISHED_REPETITION,
)


class CallLog:
    """The calls of one scheduler: a call's arrival noted at ``arrived``, the call buffered
    at ``finished`` (times on the scheduler's clock, read by the scheduler: ``TTLScheduler``
    reads it there anyway).  Its cached tokens are vLLM's own: the request's ``PrefillStats``,
    which vLLM fills at the request's first scheduling and reports in ``usage`` (it hands the
    object to the output at the first token, so it is kept from the arrival).

    The scheduler's thread does the least: a dict entry at arrival (``arrivals``), and at the
    finish one tuple of references it has at hand appended to the recorder's buffer
    (``entries``); the recorder's writer thread derives the rest (``_unpack``: whether the
    call stopped on its own, program id, tenant key, cached tokens).  A buffered call holds
    alive, until written: its ``ProgramInfo`` and tool, its status and ``PrefillStats`` (a
    few ints), its ``cache_salt`` and ``extra_args`` (the client's own, as vLLM bounds them)
    and its ``block_hashes`` list (not copied; one hash per engine block of the prompt), at most
    ``ttlpolicy.serving.record.MAX_BUFFERED_CALLS`` calls and ``MAX_BUFFERED_BYTES`` held
    (``HASH_HELD_BYTES`` a hash) past ``batch_calls`` buffered (more are dropped and
    counted)."""

    __slots__ = ("arrivals", "batch_calls", "entries", "recorder")

    def __init__(
        self,
        settings: RecordSettings,
        block_size: int,
        tenancy: Tenancy,
        clock: Callable[[], float],
        key: bytes | None = None,  # the recording's secret (None: drawn; tests fix it)
    ) -> None:
        self.recorder = Recorder(
            settings,
            engine_block_tokens=block_size,
            clock=clock,
            key=key,
            unpack=functools.partial(_unpack, tenancy),
        )
        # (arrival s, its PrefillStats) of live requests: popped when freed
        self.arrivals: dict[str, tuple[float, Any]] = {}
        # the recorder's buffer: appended to directly below ``batch_calls`` entries (the
        # writer wakes by itself each flush interval), through ``Recorder.add`` from there
        self.entries = self.recorder.buffer
        self.batch_calls = self.recorder.batch_calls
        # (not timed here: clock readings were a tenth of a call's cost; the bench times
        # the scheduler's sections with and without recording, bench/record_overhead.py)

    def arrived(self, request: Request, now_s: float) -> None:
        self.arrivals[request.request_id] = (now_s, request.prefill_stats)

    def finished(
        self, request: Request, info: ProgramInfo | None, tool: str | None, now_s: float
    ) -> None:
        """``request`` is freed at ``now_s`` (its program ``info``, None: anonymous;
        ``tool``: what it ended with); recorded when it stopped on its own (told in the
        writer)."""
        arrival = self.arrivals.pop(request.request_id, None)
        if arrival is not None:
            params = request.sampling_params
            entry = (
                info,
                tool,
                arrival,
                now_s,
                request.status,
                request.cache_salt,
                None if params is None else params.extra_args,
                request.num_prompt_tokens,
                request.num_output_tokens,
                request.block_hashes,
            )
            if len(self.entries) < self.batch_calls:
                self.entries.append(entry)
            else:  # (the writer woken, the bounds kept: calls, and hashes held alive)
                self.recorder.add(entry, now_s, len(request.block_hashes) * HASH_HELD_BYTES)

    def close(self) -> None:
        self.recorder.close()


def _unpack(tenancy: Tenancy, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``CallLog.finished``'s entry as ``Recorder.call``'s fields (in the writer thread);
    None for a call that did not stop on its own (an abort: not recorded)."""
    info, tool, (arrival_s, prefill), finish_s, status, salt, extra, prompt, output, hashes = entry
    if status not in _STOPPED:
        return None
    return (
        None if info is None else info.program_id,
        tenancy.tenant(salt, extra),
        arrival_s,
        finish_s,
        prompt,
        output,
        getattr(prefill, "num_cached_tokens", 0),  # (None: never scheduled)
        hashes,
        tool,
        info is not None and info.last_turn,
    )


def call_log_or_none(
    settings: RecordSettings | None, block_size: int, tenancy: Tenancy, clock: Callable[[], float]
) -> CallLog | None:
    return None if settings is None else CallLog(settings, block_size, tenancy, clock)


class RecordingScheduler(Scheduler):
    """Stock vLLM scheduling, recording its calls into ``TTLPOLICY_RECORD`` (required)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> RecordingScheduler:
        # as TTLScheduler: the AsyncScheduler-based variant when the engine schedules async
        if cls is RecordingScheduler:
            config = kwargs.get("vllm_config", args[0] if args else None)
            if getattr(getattr(config, "scheduler_config", None), "async_scheduling", False):
                cls = RecordingAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = time.monotonic  # tests may replace it
        settings = record_from_env()
        if settings is None:
            raise ValueError("RecordingScheduler records into TTLPOLICY_RECORD: set it")
        self.tenancy = tenancy_from_env()
        self.call_log = CallLog(settings, self.block_size, self.tenancy, lambda: self.clock())

    def add_request(self, request: Request) -> None:
        if request.request_id not in self.requests:
            self.call_log.arrived(request, self.clock())
        super().add_request(request)

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        info = program_of(request, self.tenancy)
        self.call_log.finished(request, info, None if info is None else info.tool, self.clock())
        return super()._free_request(request, delay_free_blocks)

    def shutdown(self) -> None:
        self.call_log.close()
        super().shutdown()


class RecordingAsyncScheduler(RecordingScheduler, AsyncScheduler):
    """``RecordingScheduler`` on vLLM's ``AsyncScheduler``."""
