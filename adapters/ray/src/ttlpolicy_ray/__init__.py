"""ttlpolicy for Ray Serve: ``TTLPolicyRouter`` (a ``ray.serve.request_router.RequestRouter``
answered by ``ttlpolicy.ProgramRouter``) and the replica side of it (``report``:
``RoutingStatsMixin``, ``lifecycle_stats``, ``vllm_scheduler_stats``, ``VllmEvictions``).
docs/ray.md says how to deploy it.  ``report`` and ``identity`` import no Ray; the router is
imported on first use."""

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

__all__ = [
    "REPORT_KEY",
    "RoutingStatsMixin",
    "TTLPolicyRouter",
    "VllmEvictions",
    "lifecycle_stats",
    "routing_stats",
    "vllm_scheduler_stats",
]


def __getattr__(name: str) -> Any:
    if name == "TTLPolicyRouter":  # imports Ray
        from .router import TTLPolicyRouter

        return TTLPolicyRouter
    raise AttributeError(f"module 'ttlpolicy_ray' has no attribute {name!r}")
