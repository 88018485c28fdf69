"""``ReportingTTLScheduler``: ``ttlpolicy_vllm.TTLScheduler`` that also writes its routing
report to a file (``report_file``), for a replica whose vLLM engine runs the scheduler in
an engine-core subprocess (vLLM's default).  Use it as the engine's scheduler class
(``scheduler_cls="ttlpolicy_ray.vllm_scheduler.ReportingTTLScheduler"``) with
``TTLPOLICY_REPORT_DIR`` set; the replica's ``ttlpolicy_routing_stats`` returns
``read_report(report_path(directory, os.getpid()))`` (docs/ray.md).

It writes once when built (the engine's empty state, so that routers send it calls), then
at most every ``TTLPOLICY_REPORT_PERIOD_S`` seconds (default 0.25) after a step, and when the
engine goes idle (no running request: the last finishes and their pins).
Imports vLLM: load it only in the engine's process."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ttlpolicy_vllm import TTLScheduler

from .report import VllmEvictions, vllm_scheduler_stats
from .report_file import REPORT_DIR_ENV, report_path, write_report

__all__ = ["REPORT_PERIOD_ENV", "ReportingTTLScheduler"]

logger = logging.getLogger(__name__)

#: The environment variable of the least time between two reports, in seconds.
REPORT_PERIOD_ENV = "TTLPOLICY_REPORT_PERIOD_S"
DEFAULT_REPORT_PERIOD_S = 0.25


def _period_s() -> float:
    raw = os.environ.get(REPORT_PERIOD_ENV, "")
    if not raw:
        return DEFAULT_REPORT_PERIOD_S
    try:
        period = float(raw)
    except ValueError:
        period = -1.0
    if not 0.0 <= period <= 3600.0:  # (NaN fails too)
        raise ValueError(f"{REPORT_PERIOD_ENV} must be seconds in [0, 3600], got {raw!r}")
    return period


class ReportingTTLScheduler(TTLScheduler):
    """``TTLScheduler`` writing ``vllm_scheduler_stats`` to ``report_path(TTLPOLICY_REPORT_DIR,
    <the parent process>)`` (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        directory = os.environ.get(REPORT_DIR_ENV, "")
        self.report_period_s = _period_s()
        # the engine-core process is a child of the process that built the engine: the replica
        self.report_file = report_path(directory, os.getppid()) if directory else None
        if self.report_file is None:
            logger.warning("ttlpolicy: %s is not set: no routing report is written", REPORT_DIR_ENV)
        self.reports_written = 0
        self.report_failures = 0
        self._report_evictions = VllmEvictions()
        self._last_report_s = -float("inf")
        # a first report now, all blocks free: a router routes only to replicas that have
        # reported, and this engine reports only after its steps — it would never get a call
        self._report(force=True)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = super().schedule(*args, **kwargs)
        self._report(force=False)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        result = super().update_from_output(scheduler_output, model_runner_output)
        if not self.running:  # idle: no step follows to report the last finishes
            self._report(force=True)
        return result

    def _report(self, force: bool) -> None:
        if self.report_file is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report_s < self.report_period_s:
            return
        t0 = time.perf_counter()
        self._last_report_s = now
        try:
            stats = vllm_scheduler_stats(
                self, seq=self.reports_written + 1, evictions=self._report_evictions
            )
            write_report(self.report_file, stats)
            self.reports_written += 1
        except OSError as exc:  # a full disk or a removed directory must not stop serving
            self.report_failures += 1
            if self.report_failures == 1:
                logger.warning("ttlpolicy: routing report not written to %s: %s",
                               self.report_file, exc)  # fmt: skip
        self.ttl_metrics.adapter_s += time.perf_counter() - t0
