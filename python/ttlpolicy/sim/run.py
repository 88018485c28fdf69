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
    cpu_tier: bool | None = None,
) -> Metrics:
    """Run ``programs`` under ``policy``: Poisson program arrivals at ``rate_per_s``, or
    ``concurrency`` programs in flight, or (``open_loop``) each at its own ``issue_s``.
    ``cpu_tier``: give the engine the hardware's CPU tier (None: as the policy asks)."""
    pol = make_policy(policy) if isinstance(policy, str) else policy
    if pol.runs_alone:
        return _alone(hw, pol, programs, rate_per_s, concurrency, seed, config, open_loop,
                      progress, cpu_tier)  # fmt: skip
    engine = Engine(hw, pol, config, cpu_tier=cpu_tier)
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


def _alone(
    hw: Hardware,
    pol: Policy,
    programs: list[Program],
    rate_per_s: float | None,
    concurrency: int | None,
    seed: int,
    config: EngineConfig | None,
    open_loop: bool,
    progress: Callable[[int], None] | None,
    cpu_tier: bool | None,
) -> Metrics:
    """The ``alone`` bound (``policies/alone.py``): every program on an engine of its own,
    started when the arrival process would start it (with ``concurrency``, at 0: there its
    start depends on the others' ends), under a fresh copy of the policy."""
    if open_loop:
        starts = [(p.issue_s, p) for p in programs]
    elif (rate_per_s is None) == (concurrency is None):
        raise ValueError("give exactly one of rate_per_s and concurrency")
    elif rate_per_s is not None:
        starts = list(poisson_arrivals(programs, rate_per_s, seed))
    else:
        starts = [(0.0, p) for p in programs]
    total = Metrics()
    for start_s, prog in starts:
        engine = Engine(hw, type(pol)(), config, cpu_tier=cpu_tier)
        engine.add_programs([(start_s, prog)])
        total.absorb(engine.run())
        if progress is not None:
            progress(total.programs_done)
    return total
