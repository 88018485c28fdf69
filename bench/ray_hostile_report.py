"""The cost of a hostile replica report to Ray Serve's ``TTLPolicyRouter`` (issue 44): one
call routed while a candidate's routing stats carry ``--pins`` invented pins (distinct
program ids, 30 s left, one block each).  The router applies a report once, before the
call's decision, so each repetition uses a fresh router.  Prints the median and the range
of the call's wall time, and the router's programs and counters afterwards.

Needs Ray Serve (the Ray venv, or the vLLM venv, which has it).  Before/after: run it with
``PYTHONPATH`` naming the package and adapter of each version, e.g.::

    PYTHONPATH=python:adapters/ray/src $RAY_VENV/bin/python bench/ray_hostile_report.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
from ray.serve.request_router import PendingRequest, ReplicaID
from ttlpolicy_ray import routing_stats
from ttlpolicy_ray.router import TTLPolicyRouter

DEPLOYMENT = DeploymentID(name="d", app_name="a")


class Replica:
    def __init__(self, uid: str, pins: list[tuple[str, float, int]]) -> None:
        self.replica_id = ReplicaID(unique_id=uid, deployment_id=DEPLOYMENT)
        self.routing_stats = routing_stats(
            seq=1, free_blocks=100, total_blocks=100, queue_len=0, queued_tokens=0,
            working_set_blocks=0, cached_fraction=0.0, block_size=16, pins=pins,
            max_pins=max(1, len(pins)),
        )  # fmt: skip


def one_call(pins: list[tuple[str, float, int]]) -> tuple[float, Any]:
    router = TTLPolicyRouter(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.UNKNOWN)
    router.initialize_state()
    replicas = [Replica("honest", []), Replica("hostile", pins)]

    async def go() -> float:
        pending = PendingRequest(
            args=[{"prompt": "x" * 400, "vllm_xargs": {"program_id": "p"}}],
            kwargs={},
            metadata=RequestMetadata(request_id="r", internal_request_id="i"),
        )
        t0 = time.perf_counter()
        await router.choose_replicas(replicas, pending)
        return time.perf_counter() - t0

    return asyncio.run(go()), router


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pins", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    pins = [(f"x{k}", 30.0, 1) for k in range(args.pins)]
    times, router = [], None
    for _ in range(args.repeat):
        t, router = one_call(pins)
        times.append(t)
    assert router is not None
    print(f"{args.pins} pins in one report: one call {1e3 * statistics.median(times):.1f} ms "
          f"median ({1e3 * min(times):.1f}-{1e3 * max(times):.1f}) of {args.repeat}; "
          f"router programs after: {router.program_router.program_count}")  # fmt: skip
    print({k: v for k, v in router.counters.items() if v})


if __name__ == "__main__":
    main()
