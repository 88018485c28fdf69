"""``TTLPolicyRouter`` in a real local Ray Serve (Ray 2.60) over two replicas each running a
real vLLM CPU engine (``vllm_replica.py``: a tiny random-weight Llama, ``AsyncLLM`` with its
scheduler, ``ReportingTTLScheduler``, in an engine-core child process of the replica — vLLM's
default layout, as in Ray Serve LLM), each replica returning its engine's report file from
``record_routing_stats``.  Shown: two programs' first calls go to different replicas (the
first one's pinned context fills its replica's working set); every returning call goes to
the replica whose engine pinned its program's context and finds it in vLLM's prefix cache
(``num_cached_tokens``), each call routed by the router, not by Ray's random choice; once the
programs end, neither engine reports a pin (no pin leaks).

Runs in the vLLM venv (which has Ray Serve too), beside ``test_vllm_report*.py``
(``scripts/test.sh``); by hand, from ``adapters/vllm``::

    PYTHONPATH=$PWD/../ray/src:$PWD/tests ~/.cache/ttlpolicy/venv-vllm-<key>/bin/python \\
        -m pytest -c pyproject.toml ../ray/tests/test_vllm_serve.py

The expected figures come from the workload (token counts, vLLM's block size), not from the
code under test.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

vllm_engine = pytest.importorskip("vllm_engine")  # bench/: the tiny model
pytest.importorskip("vllm")
pytest.importorskip("ttlpolicy_vllm")
ray = pytest.importorskip("ray")
import vllm_replica  # noqa: E402
from ray import serve  # noqa: E402
from serve_app import two_replicas  # noqa: E402
from ttlpolicy_ray import REPORT_DIR_ENV, REPORT_KEY  # noqa: E402
from ttlpolicy_ray.router import live_routers  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 25  # per engine; one is vLLM's null block
BLOCK = vllm_engine.BLOCK
CALL_TIMEOUT_S = 120.0
OUTPUT_TOKENS = 24


@pytest.fixture(scope="module")
def handle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("vllm-serve")
    model = vllm_engine.build_tiny_model(tmp / "tiny-llama")
    reports = tmp / "reports"
    reports.mkdir()
    env = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",  # the engine core in a child of the replica
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        # a miss priced high, so that the policy pins each turn's context
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        REPORT_DIR_ENV: str(reports),
        "TTLPOLICY_REPORT_PERIOD_S": "0",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # ttlpolicy_ray, from the checkout
    }
    ray.cloudpickle.register_pickle_by_value(vllm_replica)  # the replicas cannot import tests/
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})  # fmt: skip
    try:
        serve.start(proxy_location="Disabled")
        app = two_replicas(
            vllm_replica.VllmReplica, str(model), NUM_BLOCKS, vllm_engine.TINY_ENGINE_ARGS,
            max_ongoing_requests=8,
        )  # fmt: skip
        yield serve.run(app, name="vllm", route_prefix=None)
    finally:
        serve.shutdown()
        ray.shutdown()


def call(handle: Any, prompt: list[int], **xargs: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": OUTPUT_TOKENS, "vllm_xargs": xargs}
    return handle.remote(body).result(timeout_s=CALL_TIMEOUT_S)


def reports_until(ok: Callable[[dict[str, dict]], bool], timeout_s: float = 60.0) -> dict:
    """The router's latest report of each replica (replica id → report), once ``ok``
    accepts them."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, dict] = {}
    while time.monotonic() < deadline:
        routers = live_routers()
        if routers:
            (router,) = routers
            seen = {
                rid.unique_id: r.routing_stats.get(REPORT_KEY, {})
                for rid, r in router.curr_replicas.items()
            }
            if len(seen) == 2 and ok(seen):
                return seen
        time.sleep(0.05)
    raise AssertionError(f"no reports as expected within {timeout_s} s; last: {seen}")


def pinned(report: dict, program: str) -> bool:
    return any(pin[0] == program for pin in report.get("pins", ()))


def test_returns_follow_the_engines_pins(handle: Any, tmp_path: Path) -> None:
    call(handle, [7] * 40)  # anonymous: makes the router (at a handle's first call)
    # both replicas report, the one that has run no call too (its empty engine)
    reports_until(lambda seen: all(r.get("total_blocks") == NUM_BLOCKS - 1 for r in seen.values()))
    rng = random.Random(5)
    contexts: dict[str, list[int]] = {}
    homes: dict[str, str] = {}
    for program in ("prog-a", "prog-b"):
        prompt = [rng.randrange(3, 250) for _ in range(201)]
        out = call(handle, prompt, program_id=program, tool="bash")
        homes[program] = out["replica"]
        contexts[program] = prompt + out["tokens"]
        reports_until(lambda seen, p=program: pinned(seen[homes[p]], p))
    # the first pin counts in its replica's working set: the second program goes to the other
    assert homes["prog-a"] != homes["prog-b"], homes
    for turn in range(3):
        for program in ("prog-a", "prog-b"):
            last = turn == 2
            context = contexts[program]
            prompt = context + [rng.randrange(3, 250) for _ in range(8)]
            xargs: dict[str, Any] = {"program_id": program, "tool": "bash", "last_turn": last}
            out = call(handle, prompt, **xargs)
            # to the replica whose engine pinned the context, and found there: every full
            # block of the context (a prefix-cache hit stops one token short of the prompt)
            assert out["replica"] == homes[program], (program, turn)
            assert out["cached_tokens"] >= (len(context) - 1) // BLOCK * BLOCK, (program, turn)
            contexts[program] = prompt + out["tokens"]
            if not last:
                reports_until(lambda seen, p=program: pinned(seen[homes[p]], p))
    # the programs ended: neither engine holds a pin, and the router forgot them
    reports_until(lambda seen: not any(r.get("pins") for r in seen.values()))
    (router,) = live_routers()
    assert router.program_router.program_count == 0
