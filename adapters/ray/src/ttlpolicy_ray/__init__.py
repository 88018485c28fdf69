"""ttlpolicy for Ray Serve: ``TTLPolicyRouter`` (a ``ray.serve.request_router.RequestRouter``
answered by ``ttlpolicy.ProgramRouter``) and the replica side of it (``report``:
``RoutingStatsMixin``, ``lifecycle_stats``, ``vllm_scheduler_stats``, ``VllmEvictions``; and
``report_file``: ``read_report`` of what ``vllm_scheduler.ReportingTTLScheduler`` writes from
vLLM's engine-core process).  docs/ray.md says how to deploy it.  ``report``,
``report_file`` and ``identity`` import no Ray; the router is imported on first use."""

from __future__ import annotations

from typing import Any

from .report import (
    REPORT_KEY,
    RoutingStatsMixin,
    VllmEvictions,
    lifecycle_stats,
    routing_stats,
    vllm_scheduler_stats,
)
from .report_file import REPORT_DIR_ENV, read_report, report_path, write_report

__all__ = [
    "REPORT_DIR_ENV",
    "REPORT_KEY",
    "RoutingStatsMixin",
    "TTLPolicyRouter",
    "VllmEvictions",
    "lifecycle_stats",
    "read_report",
    "report_path",
    "routing_stats",
    "vllm_scheduler_stats",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name == "TTLPolicyRouter":  # imports Ray
        from .router import TTLPolicyRouter

        return TTLPolicyRouter
    raise AttributeError(f"module 'ttlpolicy_ray' has no attribute {name!r}")
