"""One simulation run: a workload, a policy, an arrival process → metrics."""

from __future__ import annotations

from collections.abc import Callable

from .engine import Engine, EngineConfig
from .hardware import Hardware
from .metrics import Metrics
from .policies import Policy, make_policy
from .workload import ConcurrencyArrivals, Program, poisson_arrivals


def simulate(
    hw: Hardware,
    policy: str | Policy,
    programs: list[Program],
    *,
    rate_per_s: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    config: EngineConfig | None = None,
    open_loop: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Metrics:
    """Run ``programs`` under ``policy``: Poisson program arrivals at ``rate_per_s``, or
    ``concurrency`` programs in flight, or (``open_loop``) each at its own ``issue_s``."""
    pol = make_policy(policy) if isinstance(policy, str) else policy
    engine = Engine(hw, pol, config)
    if open_loop:
        engine.add_programs((p.issue_s, p) for p in programs)
    elif (rate_per_s is None) == (concurrency is None):
        raise ValueError("give exactly one of rate_per_s and concurrency")
    elif rate_per_s is not None:
        engine.add_programs(poisson_arrivals(programs, rate_per_s, seed))
    else:
        assert concurrency is not None  # exactly one of the two was given
        engine.use_concurrency(ConcurrencyArrivals(programs, concurrency, seed))
    return engine.run(progress)
