"""Recording vLLM's traffic as sessions the simulator reads (``TTLPOLICY_RECORD=DIR``).

``CallLog`` hands each call that finished on its own to the library's recorder
(``ttlpolicy.serving.record``: the format, the keyed hashes, the rotation); ``TTLScheduler``
keeps one when the knob is set.  ``RecordingScheduler`` is stock vLLM scheduling plus the
recorder (``scheduler_cls="ttlpolicy_vllm.RecordingScheduler"``), to record traffic before
switching to ``TTLScheduler``.  Aborted calls are not recorded (the simulator has no aborts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ttlpolicy.ids import Tenancy
from ttlpolicy.serving import Recorder, RecordSettings
from ttlpolicy.serving.knobs import record_from_env, tenancy_from_env

from .compat import AsyncScheduler, Request, RequestStatus, Scheduler
from .identity import ProgramInfo, program_of

#: Statuses of a call that ended on its own (recorded); the others are aborts.
_STOPPED = (
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH_CAPPED,
    RequestStatus.FINISHED_REPETITION,
)


class CallLog:
    """The calls of one scheduler: arrival noted at ``arrived``, cached tokens at its first
    scheduling (``scheduled``: vLLM hands a request's prefill stats to the output at its first
    token, so they are read from the step), the call written at ``finished`` (times on the
    scheduler's ``clock``)."""

    def __init__(
        self,
        settings: RecordSettings,
        block_size: int,
        tenancy: Tenancy,
        clock: Callable[[], float],
    ) -> None:
        self.recorder = Recorder(settings, engine_block_tokens=block_size, clock=clock)
        self.tenancy, self.clock = tenancy, clock
        # [arrival s, cached tokens (-1: not scheduled yet)] of live requests: popped when freed
        self._calls: dict[str, list[float]] = {}
        # (not timed here: four clock readings were a tenth of a call's cost; the bench
        # times these methods from outside, bench/record_overhead.py)

    def arrived(self, request: Request) -> None:
        self._calls[request.request_id] = [self.clock(), -1]

    def scheduled(self, out: Any) -> None:
        """A step was scheduled (``out``, a SchedulerOutput): its first-scheduled requests'
        prefix hits."""
        for new in out.scheduled_new_reqs:  # (most steps only decode: none)
            call = self._calls.get(new.req_id)
            if call is not None and call[1] < 0:
                call[1] = new.num_computed_tokens

    def finished(self, request: Request, info: ProgramInfo | None, tool: str | None) -> None:
        """``request`` is freed (its program ``info``, None: anonymous; ``tool``: what it
        ended with); recorded when it stopped on its own."""
        call = self._calls.pop(request.request_id, None)
        if call is not None and request.status in _STOPPED:
            self._record(request, info, tool, call[0], max(0, int(call[1])))

    def _record(
        self,
        request: Request,
        info: ProgramInfo | None,
        tool: str | None,
        arrival: float,
        cached_tokens: int,
    ) -> None:
        extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
        self.recorder.call(
            program_id=None if info is None else info.program_id,
            tenant=self.tenancy.tenant(getattr(request, "cache_salt", None), extra),
            arrival_s=arrival,
            finish_s=self.clock(),
            prompt_tokens=request.num_prompt_tokens,
            output_tokens=request.num_output_tokens,
            cached_tokens=cached_tokens,
            block_hashes=request.block_hashes,
            tool=tool,
            last_turn=info is not None and info.last_turn,
        )

    def close(self) -> None:
        self.recorder.close()


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
            self.call_log.arrived(request)
        super().add_request(request)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = super().schedule(*args, **kwargs)
        self.call_log.scheduled(out)
        return out

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        info = program_of(request, self.tenancy)
        self.call_log.finished(request, info, None if info is None else info.tool)
        return super()._free_request(request, delay_free_blocks)

    def shutdown(self) -> None:
        self.call_log.close()
        super().shutdown()


class RecordingAsyncScheduler(RecordingScheduler, AsyncScheduler):
    """``RecordingScheduler`` on vLLM's ``AsyncScheduler``."""
