"""Stock vLLM: request-level FCFS; a finished call's blocks go to the LRU free queue and stay
reusable until evicted (automatic prefix caching).  Source: vLLM v1 scheduler and
``KVCacheManager`` / ``FreeKVCacheBlockQueue`` (github.com/vllm-project/vllm)."""

from __future__ import annotations

from ..call import Call
from .base import QueuePolicy, request_fcfs


class VLLM(QueuePolicy):
    name = "vllm"

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)
