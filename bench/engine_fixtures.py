"""What the two stand-in engines (``vllm_engine.py``, ``sglang_engine.py``) share: the clock a
test moves, and the policy the adapters' tests pin with."""

from __future__ import annotations

#: A policy that pins whenever the budget allows: a cold-start pin that clearly pays (a miss
#: costs 100 s), short tool calls, and no prefill fitting on the fake clock's zero-length steps.
TEST_POLICY = (
    '{"prefill_base_s": 100.0, "prior_mean_s": 1.0, "max_ttl_s": 30.0,'
    ' "min_prefill_samples": 1048576}'
)


class FakeClock:
    """The adapter's clock, moved by the test (pins expire when the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
