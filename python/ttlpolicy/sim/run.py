"""One simulation run: a workload, a policy, an arrival process → metrics."""

from __future__ import annotations

from collections.abc import Callable

from .cluster import Cluster, Router
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
    instances: int | None = None,
    router: str | Router | None = None,
) -> Metrics:
    """Run ``programs`` under ``policy``: Poisson program arrivals at ``rate_per_s``, or
    ``concurrency`` programs in flight, or (``open_loop``) each at its own ``issue_s``.
    ``cpu_tier``: give the engine the hardware's CPU tier (None: as the policy asks).
    ``instances``/``router``: that many engines behind the router (``sim/cluster.py``;
    ``policy`` then names the policy each engine runs a copy of)."""
    if instances is not None or router is not None:
        if not isinstance(policy, str):
            raise TypeError("with instances, policy must be a name: each engine runs a copy")
        return simulate_cluster(
            hw, policy, programs, instances=1 if instances is None else instances,
            router="round-robin" if router is None else router, rate_per_s=rate_per_s,
            concurrency=concurrency, seed=seed, config=config, open_loop=open_loop,
            progress=progress, cpu_tier=cpu_tier,
        )[0]  # fmt: skip
    pol = make_policy(policy) if isinstance(policy, str) else policy
    if pol.runs_alone:
        return _alone(hw, pol, programs, rate_per_s, concurrency, seed, config, open_loop,
                      progress, cpu_tier)  # fmt: skip
    engine = Engine(hw, pol, config, cpu_tier=cpu_tier)
    _feed(engine, programs, rate_per_s, concurrency, seed, open_loop)
    return engine.run(progress)


def _feed(
    target: Engine | Cluster,
    programs: list[Program],
    rate_per_s: float | None,
    concurrency: int | None,
    seed: int,
    open_loop: bool,
) -> None:
    """The arrival process, given to an engine or a cluster."""
    if open_loop:
        target.add_programs((p.issue_s, p) for p in programs)
    elif (rate_per_s is None) == (concurrency is None):
        raise ValueError("give exactly one of rate_per_s and concurrency")
    elif rate_per_s is not None:
        target.add_programs(poisson_arrivals(programs, rate_per_s, seed))
    else:
        assert concurrency is not None  # exactly one of the two was given
        target.use_concurrency(ConcurrencyArrivals(programs, concurrency, seed))


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


def simulate_cluster(
    hw: Hardware,
    policy: str | Callable[[], Policy],
    programs: list[Program],
    *,
    instances: int,
    router: str | Router,
    rate_per_s: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    config: EngineConfig | None = None,
    open_loop: bool = False,
    progress: Callable[[int], None] | None = None,
    cpu_tier: bool | None = None,
    kill: tuple[int, float] | None = None,
) -> tuple[Metrics, list[dict[str, float]]]:
    """``simulate`` on ``instances`` engines behind ``router``; also each instance's
    figures.  ``kill``: (instance, at_s), that instance dies then."""
    cluster = Cluster(hw, policy, instances, router, config, cpu_tier=cpu_tier)
    _feed(cluster, programs, rate_per_s, concurrency, seed, open_loop)
    if kill is not None:
        cluster.kill(*kill)
    metrics = cluster.run(progress)
    return metrics, cluster.instance_summaries()
