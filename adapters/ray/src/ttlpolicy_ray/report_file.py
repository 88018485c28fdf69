"""A replica's report across a process boundary: vLLM runs its scheduler in an engine-core
subprocess of the replica by default, out of reach of the replica's ``record_routing_stats``.

The engine-core side (``ttlpolicy_ray.vllm_scheduler.ReportingTTLScheduler``) writes its
report (``vllm_scheduler_stats``) to ``report_path(directory, <its parent's pid>)``; the
replica reads ``report_path(directory, os.getpid())`` with ``read_report``.  The directory is
``TTLPOLICY_REPORT_DIR`` in both (an environment variable, so that it reaches the engine
process through whatever starts it: Ray's ``runtime_env``, vLLM's own process start).

A file, replaced whole (``os.replace`` of a finished temporary file): a reader sees the
previous report or the next, never half of one.  Its ``seq`` is the writer's count, so the
router applies each report once however often the replica passes it on; its ``at`` is the
writer's wall time, so the router ages the pins by the time the report waited in the file.
No Ray, no vLLM here."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .report import REPORT_KEY

__all__ = ["REPORT_DIR_ENV", "read_report", "report_path", "write_report"]

#: The environment variable naming the directory of the report files (unset: no file).
REPORT_DIR_ENV = "TTLPOLICY_REPORT_DIR"
#: The largest report file read (a report of 4,096 pins and 4,096 evictions is ~0.5 MB).
MAX_REPORT_BYTES = 8 << 20


def report_path(directory: str | os.PathLike[str], replica_pid: int) -> Path:
    """The file of the replica whose process id is ``replica_pid``."""
    return Path(directory) / f"ttlpolicy-report-{int(replica_pid)}.json"


def write_report(path: str | os.PathLike[str], stats: dict[str, Any]) -> None:
    """Replace ``path`` with ``stats`` (a ``routing_stats`` dict), whole."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".ttlpolicy-report-", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(stats, out, separators=(",", ":"))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The report in ``path`` as ``routing_stats`` made it; ``{}`` (no report: the router
    keeps this replica's last) when there is none yet, or it is unreadable, too large or
    not a report — a replica's stats call must not fail for its engine's file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_REPORT_BYTES + 1)
        if len(raw) > MAX_REPORT_BYTES:
            return {}
        stats = json.loads(raw)
    except (OSError, ValueError):
        return {}
    if not isinstance(stats, dict) or not isinstance(stats.get(REPORT_KEY), dict):
        return {}
    return stats
