"""The Serve application the Ray tests deploy: two replicas of a deployment class behind
``TTLPolicyRouter`` (reports every 0.1 s), no CPU reserved for them (``ray.init(num_cpus=2)``
has two)."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from ttlpolicy_ray.router import TTLPolicyRouter


def two_replicas(cls: type, *args: Any, max_ongoing_requests: int, **kwargs: Any) -> Any:
    """``cls`` bound to ``args``/``kwargs``, as an application for ``serve.run``."""
    return serve.deployment(
        cls,
        num_replicas=2,
        max_ongoing_requests=max_ongoing_requests,
        health_check_period_s=0.5,
        ray_actor_options={"num_cpus": 0},
        request_router_config=RequestRouterConfig(
            request_router_class=TTLPolicyRouter,
            request_routing_stats_period_s=0.1,
            request_routing_stats_timeout_s=5.0,
        ),
    ).bind(*args, **kwargs)
