"""Does an order *searched for* with the trace's future beat shortest-remaining-work-first at
70B 0.008/s, enough for 1.15× over the strongest rival?
(docs/investigations/2026-rivals.md, "A bound at the heavy points").

``bench/heavy_bound.py``'s ``free:mori+srpt`` orders MORI's queue (resident programs first)
by each program's real remaining work, on a tier that keeps every chain for free.  Here the
order is a free priority per program (every call of the program waits at its program's
rank), and a local search with the simulator as its oracle looks for the priorities that
minimise the mean completion time of all programs (as ``search_bound.py`` did at the light
points): from the shortest-total-work order, move one program — drawn in proportion to how
much longer than ``alone`` it took in the best run so far — up to ``--max-shift`` places
earlier, or (one move in four) a random program that many later; kept if the mean falls.
A search finds a better order, not the best.

    PYTHONPATH=python:bench python bench/investigations/heavy_search.py \\
        [--point 'llama-3.1-70b@h100-80g=0.008'] [--seed 0] [--evaluations 150]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import numpy as np

import agent_sweep
import sim_sweep
from bounds import split_folds
from heavy_bound import OrderedMori, free_tier
from trace_paths import traces_dir
from ttlpolicy.sim import make_policy, roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS


class Ranked(OrderedMori):
    """MORI's queue, resident programs first, then by a given rank per program."""

    def __init__(self, rank: dict[str, int]) -> None:
        super().__init__("srpt")
        self.name = "mori+searched"
        self._given = rank

    def _rank(self, call: Call) -> tuple:
        return (call.program_id not in self.resident, self._given[call.program_id],
                call.issue_s, call.call_id)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", default="llama-3.1-70b@h100-80g=0.008")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluations", type=int, default=150)
    ap.add_argument("--max-shift", type=int, default=64)
    ap.add_argument("--rng", type=int, default=0, help="the search's own random seed")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    fold = [p.program_id for p in split_folds(programs, 4, traces_dir() / "claude-code")[3]]
    setup, _, rate_s = args.point.partition("=")
    model, gpu = setup.split("@")
    hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
    rate = float(rate_s)

    def run(policy, on=hw) -> dict[str, float]:
        m = simulate(on, policy, programs, rate_per_s=rate, seed=args.seed)
        return {p: end - m.program_start_s[p] for p, end in m.program_finish_s.items()}

    def means(jct: dict[str, float]) -> str:
        return f"all {statistics.fmean(jct.values()):,.0f} s, fold 3 " + (
            f"{statistics.fmean(jct[p] for p in fold):,.0f} s"
        )

    rivals = [run(make_policy(n)) for n in ("mori", "kvflow")]  # (the strongest at 70B)
    rival = min(statistics.fmean(jct[p] for p in fold) for jct in rivals)
    alone = run(make_policy("alone"))
    free = free_tier(hw)
    probe = OrderedMori("srpt")
    print(f"strongest of mori, kvflow: fold 3 {rival:,.0f} s; 1.15× asks {rival / 1.15:,.0f} s",
          flush=True)  # fmt: skip
    print(f"free:mori+srpt: {means(run(probe, free))}", flush=True)
    work = {prog.program_id: probe.work(prog.turns) for prog in programs}
    order = sorted(alone, key=lambda p: work[p])
    best_jct = run(Ranked({q: r for r, q in enumerate(order)}), free)
    best = statistics.fmean(best_jct.values())
    print(f"start (shortest total work first): {means(best_jct)}", flush=True)
    rng, kept, t0 = random.Random(args.rng), 0, time.perf_counter()
    for i in range(args.evaluations):
        cand = list(order)
        shift = rng.randint(1, args.max_shift)
        if rng.random() < 0.75:
            excess = np.array([max(0.0, best_jct[p] - alone[p]) for p in cand]) + 1e-9
            j = min(
                len(cand) - 1, int(np.searchsorted(np.cumsum(excess), rng.random() * excess.sum()))
            )
            cand.insert(max(0, j - shift), cand.pop(j))
        else:
            j = rng.randrange(len(cand))
            cand.insert(min(len(cand), j + shift), cand.pop(j))
        got = run(Ranked({q: r for r, q in enumerate(cand)}), free)
        if statistics.fmean(got.values()) < best:
            order, best, best_jct, kept = cand, statistics.fmean(got.values()), got, kept + 1
        if (i + 1) % 25 == 0:
            print(f"{i + 1} evaluations ({time.perf_counter() - t0:.0f} s), {kept} kept: "
                  f"{means(best_jct)}", flush=True)  # fmt: skip
    fold_best = statistics.fmean(best_jct[p] for p in fold)
    print(
        f"searched: {means(best_jct)}; strongest rival / searched (fold 3) {rival / fold_best:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
