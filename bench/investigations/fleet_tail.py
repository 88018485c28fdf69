"""Why the `ttlpolicy` router's p95 trails `session-hash`'s at 8B 0.016/s (seeds 1, 2), and
whether limiting how often a program is freed closes it (docs/investigations/fleet-routers.md,
"The tail").  The router is the library's, unchanged; a variant only withholds some of the
simulator's eviction reports (``ProgramRouter.evicted``), so a program is freed less often:

* ``base``: every report (the library's rule as shipped);
* ``budget:K,C``: a program is freed at most ``K + calls // C`` times (``C`` 0: ``K`` times);
* ``young:N``: only while it has made at most ``N`` calls.

Or the router prices a freed program's move (every report kept; the Python reference router
with ``route`` changed for a freed program only):

* ``stay:K``: every instance but the one that freed it costs ``K`` times the loss of a
  context more (``miss + eta * T``: a move makes it a new program there, ranked last);
* ``stayr:K``: the same, and the one that freed it is priced behind its return queue only
  (its returns still rank by its arrival there);
* ``adm:K``: a new (or freed) program's call is charged ``K · T`` more at an instance for
  each program waiting there for load control's admission (the router prices a full working
  set as one ``T`` whatever waits; the simulator's counts, not a report).

    PYTHONPATH=python:bench python bench/investigations/fleet_tail.py \
        [--variants base,budget:1,4,young:8] [--seeds 0,1,2] [--rates 0.008,0.016] [--moves]

Prints mean / p95 / fold-3 mean per cell; ``--moves`` also the moves of the tail programs
(calls served by another instance than the call before) under each variant and under
`session-hash`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import sys
import time
from typing import Any

import numpy as np

import sim_sweep
from agent_sweep import OPTIONS
from bounds import fold_of
from ttlpolicy.reference.policy import TTLPolicy as RefPolicy
from ttlpolicy.reference.router import ProgramRouter as RefRouter
from ttlpolicy.sim import roofline
from ttlpolicy.sim.cluster import Cluster, TTLPolicyRouter, make_router
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.run import simulate_cluster


class _Withholding:
    """The library's router, but for the eviction reports ``frees`` turns down."""

    def __init__(self, router: Any, variant: str) -> None:
        self._router = router
        self.freed: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        kind, _, arg = variant.partition(":")
        self._k: int | None
        self._n: int | None
        if kind == "budget":
            k, _, c = arg.partition(",")
            self._k, self._c, self._n = int(k), int(c or 0), None
        elif kind == "young":
            self._k, self._c, self._n = None, 0, int(arg)
        elif kind == "base":
            self._k, self._c, self._n = None, 0, None
        else:
            raise SystemExit(f"--variants: base, budget:K,C or young:N, got {variant!r}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)

    def route(self, program_id: str, *args: Any) -> str:
        self.calls[program_id] += 1
        return self._router.route(program_id, *args)

    def evicted(self, instance_id: str, program_id: str, held_blocks: int = 0) -> bool:
        calls = self.calls[program_id]
        if self._n is not None and calls > self._n:
            return False
        if self._k is not None and self.freed[program_id] >= self._k + (
            calls // self._c if self._c else 0
        ):
            return False
        freed = self._router.evicted(instance_id, program_id, held_blocks)
        self.freed[program_id] += freed
        return freed


class _Pricing(RefRouter):
    """The reference router; a freed program's next call prices a move (``stay``/``stayr``), a
    new or freed one's the programs waiting for admission (``adm``)."""

    def __init__(
        self, policy: Any, max_instances: int, k: float, returns: bool, admission_k: float = 0.0
    ) -> None:
        super().__init__(RefPolicy(), max_instances=max_instances)
        self._engine_policy = policy  # the engines' (native) policy: only its prices are read
        self._k, self._returns, self._admission_k = k, returns, admission_k
        self._former: dict[str, int] = {}
        #: programs waiting for admission at each instance, set before each route (``adm``)
        self.waiting_programs: list[int] = []

    @property
    def policy(self) -> Any:  # (what ``route`` prices with)
        return self._engine_policy

    def evicted(self, instance_id: Any, program_id: Any, held_blocks: Any = 0) -> bool:
        prog = self._programs.get(program_id)
        home = None if prog is None else prog.home
        freed = super().evicted(instance_id, program_id, held_blocks)
        if freed and home is not None:
            self._former[program_id] = home
        return freed

    def route(self, program_id: Any, now: Any, blocks_needed: Any, prefix_tokens: Any) -> str:
        former = self._former.pop(program_id, None)
        if program_id in self._programs or (former is None and not self._admission_k):
            return super().route(program_id, now, blocks_needed, prefix_tokens)
        policy = self.policy
        wait_memory_s = policy.out_of_order_cost_s
        loss = policy.miss_cost_s(prefix_tokens) + policy.eta * wait_memory_s
        best = None
        for i, inst in enumerate(self._instances):
            if not inst.reported:
                continue
            if i == former and self._returns:
                ahead, tokens = inst.return_queue_len, inst.return_queued_tokens
            else:
                ahead, tokens = inst.queue_len, inst.queued_tokens
            queue_s = ahead * policy.miss_cost_s(tokens // ahead) if ahead else 0.0
            fits = blocks_needed <= inst.free_blocks and (
                inst.working_set_blocks + blocks_needed <= inst.total_blocks
            )
            cost = queue_s if fits else queue_s + wait_memory_s
            if former is not None and i != former:
                cost += self._k * loss
            if self._admission_k and self.waiting_programs:
                cost += self._admission_k * wait_memory_s * self.waiting_programs[i]
            room = inst.total_blocks - inst.working_set_blocks - blocks_needed
            key = (cost, 0 if i == former else 1, -room, i)
            if best is None or key < best:
                best = key
        assert best is not None
        # the library's route does the bookkeeping: the others hidden, it can only choose this
        hidden = [inst for i, inst in enumerate(self._instances) if i != best[3] and inst.reported]
        for inst in hidden:
            inst.reported = False
        try:
            return super().route(program_id, now, blocks_needed, prefix_tokens)
        finally:
            for inst in hidden:
                inst.reported = True


class VariantRouter(TTLPolicyRouter):
    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant

    def choose(self, run: Any, turn_index: int, now: float) -> int:
        if isinstance(self.router, _Pricing) and self.router._admission_k:
            self.router.waiting_programs = [
                getattr(getattr(e.policy, "admission", None), "waiting_count", 0)
                for e in self.cluster.engines
            ]
        return super().choose(run, turn_index, now)

    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        kind, _, arg = self.variant.partition(":")
        if kind in ("stay", "stayr", "adm"):
            k = float(arg) if kind != "adm" else 0.0
            adm = float(arg) if kind == "adm" else 0.0
            self.router = _Pricing(self.policy, len(cluster.engines), k, kind == "stayr", adm)
            for iid in self._ids:
                self.router.add_instance(iid)
        else:
            self.router = _Withholding(self.router, self.variant)


def run_one(hw: Any, programs: list, variant: str, rate: float, seed: int, instances: int,
            moves: bool) -> str:  # fmt: skip
    """One cell under one variant (or `session-hash`): its line of figures."""
    router = make_router(variant) if variant == "session-hash" else VariantRouter(variant)
    where: dict[str, list[int]] = collections.defaultdict(list)
    choose = router.choose

    def recording(run: Any, turn: int, now: float) -> int:
        i = choose(run, turn, now)
        where[run.program.program_id].append(i)
        return i

    router.choose = recording  # type: ignore[method-assign, assignment]
    m, _ = simulate_cluster(
        hw, "ttlpolicy", programs, instances=instances, router=router,
        rate_per_s=rate * instances, seed=seed,
    )  # fmt: skip
    jct = {p: end - m.program_start_s[p] for p, end in m.program_finish_s.items()}
    v = np.array(list(jct.values()))
    p95 = float(np.percentile(v, 95))
    f3 = np.mean([x for p, x in jct.items() if fold_of(p, 4) == 3])
    line = f"{variant}: mean {v.mean():,.0f} p95 {p95:,.0f} fold 3 {f3:,.0f}"
    if moves:
        moved = {p: sum(a != b for a, b in itertools.pairwise(w)) for p, w in where.items()}
        tail = [p for p, x in jct.items() if x >= p95]
        line += (
            f"; moves a program {np.mean(list(moved.values())):.2f}, tail programs "
            f"{np.mean([moved[p] for p in tail]):.1f} moves in "
            f"{np.mean([len(where[p]) for p in tail]):.0f} calls"
        )
    return line


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base,budget:1,4,young:8")
    ap.add_argument("--setups", default="llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g")
    ap.add_argument("--rates", default="0.008,0.016", help="per instance, /s")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--moves", action="store_true")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, OPTIONS)
    if programs is None:
        return 2
    # "budget:1,4" holds a comma: a bare number continues the budget before it
    variants: list[str] = []
    for part in args.variants.split(","):
        if variants and part.isdigit() and variants[-1].startswith("budget:"):
            variants[-1] += "," + part
        else:
            variants.append(part)
    variants += ["session-hash"] if args.moves else []
    for setup in args.setups.split(","):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for rate in map(float, args.rates.split(",")):
            for seed in map(int, args.seeds.split(",")):
                for variant in variants:
                    t = time.perf_counter()
                    line = run_one(hw, programs, variant, rate, seed, args.instances, args.moves)
                    print(f"{model} {rate:g}/s seed {seed} {line} "
                          f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
