"""Pin every non-final call's blocks for a fixed time, then free them to the LRU queue;
request-level FCFS as vLLM.  The strawman of the CacheTTL paper (arXiv 2511.02230, §3) and
the behaviour of a static keep-alive (e.g. SGLang/Dynamo session TTLs)."""

from __future__ import annotations

from ..call import Call
from .base import PinningPolicy, request_fcfs


class FixedTTL(PinningPolicy):
    def __init__(self, ttl_s: float) -> None:
        super().__init__()
        if not ttl_s >= 0 or ttl_s == float("inf"):
            raise ValueError(f"fixed-ttl seconds must be a finite number >= 0, got {ttl_s!r}")
        self.fixed_s = ttl_s
        self.name = f"fixed-ttl={ttl_s:g}"

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)

    def ttl_s(self, call: Call, now: float, chain_blocks: int) -> float:
        return self.fixed_s
