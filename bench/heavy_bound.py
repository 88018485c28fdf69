"""At issue 46's heavy points (8B 0.01/s, 70B 0.008/s, CPU tier 256 GB a GPU), how far below
the strongest rival's mean completion time can a policy get?  Simulator bounds, each a
relaxation that reads the future or changes the hardware — never a default
(docs/investigations/2026-rivals.md, "A bound at the heavy points"):

* ``free:<policy>`` — **perfect retention**: the same engine with a CPU tier that never fills
  and copies in no time, so every chain leaving the GPU is kept and comes back at once: no
  return pays a re-prefill or a reload.  What any retention rule could give that policy's
  serving order;
* ``mori+sjf``, ``mori+srpt`` — **an order that reads the future**: MORI (its tiers, its
  admission) with its queue ordered by each program's real remaining work (uncached prompt
  tokens plus 10 × output tokens of its calls still to come) instead of program arrival:
  first calls only (``sjf``: which program starts next), or every call (``srpt``);
  ``free:mori+srpt`` has both relaxations;
* ``hbm:<policy>`` — **unlimited HBM** (KV memory × 100): running calls no longer compete for
  GPU memory.  Outside the class (no cache policy adds HBM); it places the ceiling;
* ``mori+las`` — not a bound: the order without foresight, least attained LLM time first;
* ``mori+psjf``, ``mori+psrpt``, ``mori+pgittins`` — not bounds: ``sjf`` / ``srpt`` with each
  program's remaining work **predicted** without foresight (``predicted_work``: from its
  sub-agent flag, turns done and the queued call's prompt size, fitted on the training folds
  only), or by its bucket's Gittins index; ``psrpt`` and ``pgittins`` keep first calls after
  every return; ``ttlpolicy-offload[:admission]+psjf`` orders that policy's first calls so
  (``PredictedFirstOffload``).

All 512 programs run together, fold 3's programs are reported (bench/rivals.py's runs;
``--fold 0,3``: each fold's figures from the same runs, fold 0 the tuning fold of the
predicted orders, ``docs/investigations/2026-rivals.md``, "An order without foresight"):

    PYTHONPATH=python:bench python bench/heavy_bound.py [--seeds 0,1,2,3] [--fold 3] \\
        [--points 'llama-3.1-8b@h100-80g=0.01;llama-3.1-70b@h100-80g=0.008'] \\
        [--runs mori,free:mori,mori+srpt,...] [--decode-weight 10] [--json F]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import statistics
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from bounds import agentic_folds
from predicted_work import CrossFitPredictor, fit_cross, turn_work
from rivals import run_figures
from ttlpolicy.sim import EngineConfig, make_policy, roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS, Hardware
from ttlpolicy.sim.interface import Policy
from ttlpolicy.sim.policies.mori import Mori
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyOffload, make_ttlpolicy
from ttlpolicy.sim.workload import Turn

POINTS = "llama-3.1-8b@h100-80g=0.01;llama-3.1-70b@h100-80g=0.008"
#: the rivals of issue 46 (the strongest: the lowest mean completion among those run)
RIVALS = ("vllm-offload", "infercept", "continuum", "mori", "tokencake", "kvflow")
RUNS = (
    "alone",
    "mori",
    "kvflow",
    "vllm-offload",
    "ttlpolicy-offload",
    "free:mori",
    "free:kvflow",
    "free:ttlpolicy-offload",
    "mori+las",
    "mori+sjf",
    "mori+srpt",
    "free:mori+srpt",
    "hbm:mori",
    "hbm:ttlpolicy-offload",
    "hbm:mori+srpt",
)
#: the prefill-token equivalents of one output token in a program's remaining work
DECODE_WEIGHT = 10.0


class OrderedMori(Mori):
    """MORI with its queue's second key — program arrival — replaced: resident programs'
    calls still go first.  ``srpt``: the least remaining work of the call's program first
    (it reads the future: a bound); ``sjf``: that for first calls, after every return (which
    keep program arrival); ``las``: the least LLM time attained so far (no foresight).
    Predicted (no foresight: ``predicted_work``): ``psjf`` is ``sjf`` with the predicted
    remaining work; ``psrpt`` orders returns by it, and first calls after every return by
    it (a new program does not jump a return, as it does under ``las``); ``pgittins`` as
    ``psrpt`` by the highest Gittins index of the program's bucket instead."""

    ORDERS = ("sjf", "srpt", "las", "psjf", "psrpt", "pgittins")
    PREDICTED = ("psjf", "psrpt", "pgittins")

    def __init__(
        self,
        order: str,
        decode_weight: float = DECODE_WEIGHT,
        predictor: CrossFitPredictor | None = None,
    ) -> None:
        if order not in self.ORDERS:
            raise ValueError(f"order must be one of {', '.join(self.ORDERS)}, got {order!r}")
        if (order in self.PREDICTED) != (predictor is not None):
            raise ValueError(f"order {order!r}: a predictor is needed by psjf and psrpt only")
        super().__init__()
        self.order = order
        self.decode_weight = decode_weight
        self.predictor = predictor
        self.name = f"mori+{order}"

    def work(self, turns: Sequence[Turn]) -> float:
        """``turns``' work in prefill-token equivalents (uncached prompt + weighted output)."""
        b = self._block_tokens()
        return sum(turn_work(t, b, self.decode_weight) for t in turns)

    def remaining_work(self, call: Call) -> float:
        """The call's program's work from this call on: predicted (``predictor``), else its
        real work (it reads the future)."""
        if self.predictor is not None:
            return self.predictor.remaining_work(call)
        return self.work(call.prog.program.turns[call.turn_index :])

    def _rank(self, call: Call) -> tuple:
        first = call.turn_index == 0
        order = self.order
        if order == "las":
            rank = self._llm_s.get(call.program_id, 0.0)
        elif order == "pgittins":
            assert self.predictor is not None  # (checked in __init__)
            rank = -self.predictor.gittins_index(call)
        elif order in ("srpt", "psrpt") or first:
            rank = self.remaining_work(call)
        else:
            rank = call.program_arrival_s
        late = first and order != "srpt" and order != "las"  # (returns first, but srpt, las)
        return (call.program_id not in self.resident, late, rank, call.issue_s, call.call_id)


class ChosenOffload(TTLPolicyOffload):
    """ttlpolicy-offload whose ``peek`` may name a waiting call other than the library's head
    (setting ``_chosen`` to its request id), which ``pop`` then runs through the scheduler's
    ``take``; ``popped`` hears each call popped, and whether it was so taken."""

    def __init__(self, **options: Any) -> None:
        # (the library's skip past a large head stays off: these variants order by their own
        # rules, and the rows measured with them were measured so)
        if options.get("skip_depth") is None:
            options["skip_depth"] = 0
        super().__init__(**options)
        self._chosen: str | None = None

    def pop(self) -> Call:
        rid, self._chosen = self._chosen, None
        if rid is None:
            call = super().pop()
        else:
            self.sched.take(rid, self.view.now)
            call = self._calls[rid]
        self.popped(call, rid is not None)
        return call

    def popped(self, call: Call, taken: bool) -> None:
        """``pop`` returns ``call`` (``taken``: past the library's head)."""


class TakenOffload(ChosenOffload):
    """ttlpolicy-offload with some waiting calls served in an order of the bench's own,
    through the scheduler's ``take``: when a call given to ``reorder`` heads the library's
    queue, the waiting ``reorder`` call of the least rank runs instead (the subclass gives
    calls that the library ranks alike, so that only they wait then).  A chosen call that
    load control refuses (``AdmissionControl.may_run``) gives way to the library's head."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._ranked: list[tuple[float, int, str]] = []  # (rank, call id, request)
        self._reordered: set[str] = set()  # calls given to ``reorder`` not yet popped

    def reorder(self, call: Call, rank: float) -> None:
        rid = str(call.call_id)
        heapq.heappush(self._ranked, (rank, call.call_id, rid))
        self._reordered.add(rid)

    def peek(self) -> Call | None:
        head = self.sched.peek()
        if head is None or head not in self._reordered:
            self._chosen = None
            return super().peek()
        while self._ranked[0][2] not in self._reordered:
            heapq.heappop(self._ranked)  # (popped already)
        rid = self._chosen = self._ranked[0][2]
        call = self._calls[rid]
        if not self.may_run(rid):
            self._chosen = None  # (refused: the library's head, as load control asks)
            return super().peek()
        return call

    def popped(self, call: Call, taken: bool) -> None:
        self._reordered.discard(str(call.call_id))


class PredictedFirstOffload(TakenOffload):
    """``ttlpolicy-offload[:variant]+psjf``: ttlpolicy-offload whose first calls — which the
    library serves after every other call, by program arrival — go instead by the least
    predicted work (``predicted_work``; no foresight).  Bench-side, through the scheduler's
    ``take``: the library's order of every other call and its pins are unchanged.  Its load
    control admits programs in arrival order (``AdmissionControl.may_run``: the oldest
    waiting program first), so a chosen first call it refuses gives way to the library's
    head — with load control on, the order can change little; ``:admission`` (load
    control off) lets it act."""

    def __init__(self, predictor: CrossFitPredictor, **options: Any) -> None:
        super().__init__(**options)
        self.predictor = predictor

    def arrive(self, call: Call, now: float) -> bool:
        # (the library ranks fresh first calls after every other call: when one heads the
        # queue, only fresh first calls wait)
        if call.turn_index == 0:
            self.reorder(call, self.predictor.remaining_work(call))
        return super().arrive(call, now)


def free_tier(hw: Hardware) -> Hardware:
    """``hw`` with a CPU tier that never fills (10^18 bytes) and a host link that copies in
    no time (10^30 bytes/s): a chain leaving the GPU is kept and returns at once."""
    gpu = dataclasses.replace(hw.gpu, pcie_bytes_per_s=1e30)
    return dataclasses.replace(hw, gpu=gpu, cpu_tier_bytes=1e18)


def unlimited_hbm(hw: Hardware) -> Hardware:
    """``hw`` with its KV memory × 100: nothing waits for memory, nothing is evicted."""
    return dataclasses.replace(hw, kv_capacity_bytes=hw.kv_capacity_bytes * 100)


def make_run(
    name: str,
    hw: Hardware,
    decode_weight: float = DECODE_WEIGHT,
    predictor: CrossFitPredictor | None = None,
) -> tuple[Policy, Hardware]:
    """The policy and hardware of a run name: ``[free:|hbm:]<policy>``, the policy a
    simulator policy or ``mori+<order>`` (``OrderedMori``, its work counting an output
    token as ``decode_weight`` prompt tokens; ``predictor`` for the predicted orders)."""
    relax, _, base = name.partition(":") if name.startswith(("free:", "hbm:")) else ("", "", name)
    run_hw = free_tier(hw) if relax == "free" else unlimited_hbm(hw) if relax == "hbm" else hw
    if base.startswith("mori+"):
        order = base.removeprefix("mori+")
        used = predictor if order in OrderedMori.PREDICTED else None
        return OrderedMori(order, decode_weight, used), run_hw
    if base.startswith("ttlpolicy-offload") and base.endswith("+psjf"):
        if predictor is None:
            raise ValueError(f"run {name!r} needs a predictor")
        variant = base.removesuffix("+psjf").partition(":")[2]
        plugin = make_ttlpolicy(
            "ttlpolicy-offload", variant, partial(PredictedFirstOffload, predictor)
        )
        plugin.name = base
        return plugin, run_hw
    return make_policy(base), run_hw


def one_run(hw: Hardware, name: str, programs: list, rate: float, seed: int,
            ids: dict[int, list[str]], decode_weight: float = DECODE_WEIGHT,
            predictor: CrossFitPredictor | None = None) -> dict[int, dict]:  # fmt: skip
    """bench/rivals.py's figures of one run (completion of each fold's ``ids``, TTFT,
    throughput), by fold."""
    policy, run_hw = make_run(name, hw, decode_weight, predictor)
    t = time.perf_counter()
    m = simulate(run_hw, policy, programs, rate_per_s=rate, seed=seed)
    wall_s = time.perf_counter() - t
    return {f: {**run_figures(m, fold_ids), "wall_s": wall_s} for f, fold_ids in ids.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default=POINTS)
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument(
        "--fold", default="3", help="the folds reported, comma-separated (validation: 3)"
    )
    ap.add_argument("--cpu-gb", type=float, default=256.0, help="CPU tier per GPU, GB")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument(
        "--decode-weight",
        type=float,
        default=DECODE_WEIGHT,
        help="prompt tokens an output token counts as in a program's remaining work",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    loaded = agentic_folds()
    if loaded is None:
        return 2
    programs, folds = loaded
    ids = {f: [p.program_id for p in folds[f]] for f in map(int, args.fold.split(","))}
    names = args.runs.split(",")
    # fitted on the training folds only, cross-fitted (``predicted_work``)
    predictor = fit_cross(programs, EngineConfig().block_tokens, args.decode_weight)
    results: list[dict] = []
    for point in args.points.split(";"):
        setup, _, rates = point.partition("=")
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=args.cpu_gb * 1e9 * MODELS[model].tp)
        for rate in map(float, rates.split(",")):
            for seed in map(int, args.seeds.split(",")):
                rows = {f: {"setup": setup, "rate": rate, "seed": seed, "fold": f} for f in ids}
                for name in names:
                    got = one_run(
                        hw, name, programs, rate, seed, ids, args.decode_weight, predictor
                    )
                    for f, figures in got.items():
                        rows[f][name] = figures
                    print(f"  {setup} {rate:g}/s seed {seed} {name}: {got}", flush=True)
                results += rows.values()
    table(results, names)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def table(results: list[dict], names: list[str]) -> None:
    """Per point, each run's means over the seeds, and the strongest rival's mean JCT over
    each run's (what 1.15× asks of a run: ≥ 1.15)."""
    print("\n| point | fold | run | JCT mean s | JCT p95 s | tok/s | hit | strongest rival / run |")
    print("|---|---|---|---|---|---|---|---|")
    for point in sorted({(r["setup"], r["rate"], r.get("fold", 3)) for r in results}):
        setup, rate, fold = point
        rows = [r for r in results if (r["setup"], r["rate"], r.get("fold", 3)) == point]
        mean = {n: {k: statistics.fmean(r[n][k] for r in rows) for k in rows[0][n]} for n in names}
        best = min((mean[n]["jct_mean_s"] for n in names if n in RIVALS), default=float("nan"))
        for n in names:
            f = mean[n]
            print(
                f"| {setup} {rate:g}/s | {fold} | {n} | {f['jct_mean_s']:,.0f} "
                f"| {f['jct_p95_s']:,.0f} "
                f"| {f['throughput_tok_s']:.1f} | {f['hit_rate']:.3f} "
                f"| {best / f['jct_mean_s']:.3f} |"
            )


if __name__ == "__main__":
    sys.exit(main())
