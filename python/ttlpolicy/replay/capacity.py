"""How many concurrent agents a server holds under a TTFT bound, as kv-cache-tester finds it:
closed loops of n agents, n doubling from 1 while the step's TTFT percentile stays within the
bound (and no call fails), then bisected between the last n that held and the first that
broke.  Each step runs for a fixed time on fresh copies of the programs (new text: no step
reuses another's cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Most steps one search runs (doubling to 1024 agents and bisecting takes 20).
MAX_STEPS = 24


def find_capacity(
    measure: Callable[[int], dict[str, Any]],
    *,
    ttft_bound_s: float,
    quantile_key: str = "ttft_p95_s",
    max_agents: int = 256,
) -> dict[str, Any]:
    """``measure(n)``: the replay summary of a step with ``n`` agents.  Returns the largest n
    that held (0: not even one), whether the search reached ``max_agents`` without breaking,
    why it stopped early (a step interrupted), and every step's summary."""
    steps: list[dict[str, Any]] = []

    def holds(n: int) -> bool | None:
        s = measure(n)
        q = s.get(quantile_key)
        ok = s["errors"] == 0 and s["calls"] > 0 and q is not None and q <= ttft_bound_s
        steps.append({"agents": n, "holds": ok, "summary": s})
        return None if s.get("stopped") == "interrupted" else ok

    good, bad, n = 0, None, 1
    while len(steps) < MAX_STEPS:
        verdict = holds(n)
        if verdict is None:
            return _result(good, steps, "interrupted", max_agents)
        if not verdict:
            bad = n
            break
        good = n
        if n >= max_agents:
            break
        n = min(2 * n, max_agents)
    while bad is not None and bad - good > 1 and len(steps) < MAX_STEPS:
        mid = (good + bad) // 2
        verdict = holds(mid)
        if verdict is None:
            return _result(good, steps, "interrupted", max_agents)
        good, bad = (mid, bad) if verdict else (good, mid)
    return _result(good, steps, None, max_agents)


def _result(good: int, steps: list[dict[str, Any]], stopped: str | None, max_agents: int) -> dict:
    return {
        "capacity_agents": good,
        "reached_max_agents": good >= max_agents,
        "stopped": stopped,
        "steps": steps,
    }
