"""A Ray Serve replica running a real vLLM engine (``AsyncLLM``, vLLM's default layout: the
scheduler in an engine-core child process of the replica) with
``ttlpolicy_ray.vllm_scheduler.ReportingTTLScheduler``; ``record_routing_stats`` returns the
report the engine core wrote (docs/ray.md, "vLLM and SGLang behind Ray Serve LLM").  A call
is ``{"prompt": [token ids], "max_tokens": n, "vllm_xargs": {...}}``: greedy, the output
length fixed; it returns the replica's id, the output token ids and how many prompt tokens
vLLM found in its prefix cache.  Used by ``test_vllm_serve.py`` (registered by value: the
replicas cannot import tests/)."""

from __future__ import annotations

import itertools
import os
from typing import Any

from ray import serve
from ttlpolicy_ray import REPORT_DIR_ENV, RoutingStatsMixin, read_report, report_path

SCHEDULER = "ttlpolicy_ray.vllm_scheduler.ReportingTTLScheduler"


class VllmReplica(RoutingStatsMixin):
    def __init__(self, model: str, num_blocks: int, engine_args: dict[str, Any]) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=model, num_gpu_blocks_override=num_blocks, scheduler_cls=SCHEDULER, **engine_args
        )
        self.engine = AsyncLLM.from_engine_args(args)
        self.report_file = report_path(os.environ[REPORT_DIR_ENV], os.getpid())
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.ids = itertools.count()

    def ttlpolicy_routing_stats(self, seq: int) -> dict[str, Any]:
        return read_report(self.report_file)  # the engine's own seq: each report applied once

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            max_tokens=body["max_tokens"],
            temperature=0.0,
            ignore_eos=True,
            extra_args=dict(body.get("vllm_xargs") or {}) or None,
        )
        rid = f"{self.replica}-{next(self.ids)}"
        final = None
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=body["prompt"]), params, rid
        ):
            final = out
        assert final is not None and final.finished
        return {
            "replica": self.replica,
            "tokens": list(final.outputs[0].token_ids),
            "cached_tokens": final.num_cached_tokens or 0,
        }

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
