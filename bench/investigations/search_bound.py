"""Does a start order *searched for* with the whole future beat the shortest-first bounds at
seed 2's onset, enough for 1.4× against continuum and cachettl?
(docs/investigations/bounds-folds-and-the-expected-working-set.md, "Searching the start order").

``order_bound.py``'s bounds start waiting programs by a rule (first come, or least remaining
work).  Here the rule is replaced by a free priority per program, and a local search with the
simulator as its oracle looks for the priorities that minimise the mean completion time of
the arrival seed it is scored on: the clairvoyant bound's pins, eviction and admission, and
its returns ahead of first calls, unchanged; only which waiting program starts next differs.
Moves: take one program (drawn in proportion to how much longer than alone it took, in the
current best run) and move it up to ``--max-shift`` places earlier in the priority order, or
(one move in four) a random program that many places later; kept if the mean falls.  Starts
from the shortest-first order (``clairvoyant+sjf``).  A search finds a better order, not the
best: the figure is still a heuristic's, with more foresight spent on it.

    PYTHONPATH=python:bench python bench/investigations/search_bound.py \
        [--points 'llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003'] [--seed 2] \
        [--evaluations 150]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
from order_bound import ShortestFirst, jct_s, point_hardware

import sim_sweep
from agent_sweep import OPTIONS
from ttlpolicy.sim import make_policy, simulate
from ttlpolicy.sim.call import Call


class Ranked(ShortestFirst):
    """The shortest-first bound with waiting programs started by a given rank instead (lowest
    first); returns of running programs still first, by first arrival."""

    name = "clairvoyant+searched"

    def __init__(self, rank: dict[str, int]) -> None:
        super().__init__(returns_too=False, decode_weight=10.0)
        self._rank = rank

    def rank(self, call: Call) -> float:
        return self._rank[call.program_id]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--evaluations", type=int, default=150)
    ap.add_argument("--max-shift", type=int, default=64)
    ap.add_argument("--rng", type=int, default=0, help="the search's own random seed")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, OPTIONS)
    if programs is None:
        return 2
    rng = random.Random(args.rng)
    print(
        "| point | seed | continuum | cachettl | alone | clairvoyant+sjf | searched, start "
        "| searched | × continuum / cachettl | needed for 1.4× both | evaluations |"
    )
    print("|---" * 11 + "|")
    for point in args.points.split(";"):
        model, rate_s, hw = point_hardware(point)
        rate = float(rate_s)

        def run(policy, hw=hw, rate=rate) -> dict[str, float]:
            return jct_s(simulate(hw, policy, programs, rate_per_s=rate, seed=args.seed))

        base = {
            n: float(np.mean(list(run(make_policy(n)).values()))) for n in ("continuum", "cachettl")
        }
        alone = run(make_policy("alone"))
        sjf = ShortestFirst(False, 10.0)
        sjf_mean = float(np.mean(list(run(sjf).values())))  # also sets its block size
        work = {prog.program_id: sjf.work(prog.turns) for prog in programs}
        order = sorted(alone, key=lambda p: work[p])
        best_jct = run(Ranked({q: r for r, q in enumerate(order)}))
        best = start = float(np.mean(list(best_jct.values())))
        t0 = time.perf_counter()
        kept = 0
        for i in range(args.evaluations):
            cand = list(order)
            shift = rng.randint(1, args.max_shift)
            if rng.random() < 0.75:
                excess = np.array([max(0.0, best_jct[p] - alone[p]) for p in cand]) + 1e-9
                j = int(np.searchsorted(np.cumsum(excess), rng.random() * excess.sum()))
                j = min(j, len(cand) - 1)
                p = cand.pop(j)
                cand.insert(max(0, j - shift), p)
            else:
                j = rng.randrange(len(cand))
                p = cand.pop(j)
                cand.insert(min(len(cand), j + shift), p)
            try:
                got = run(Ranked({q: r for r, q in enumerate(cand)}))
            except RuntimeError:  # an order may stall the engine: not kept
                continue
            mean = float(np.mean(list(got.values())))
            if mean < best:
                order, best, best_jct, kept = cand, mean, got, kept + 1
            if (i + 1) % 25 == 0:
                line = f"{i + 1} evaluations, {kept} kept, best {best:,.0f} s"
                elapsed_s = time.perf_counter() - t0
                print(
                    f"  {model} {rate_s}/s: {line} ({elapsed_s:.0f} s)", file=sys.stderr, flush=True
                )
        cells = [
            f"{model} {rate_s}/s",
            str(args.seed),
            *(f"{base[n]:,.0f}" for n in ("continuum", "cachettl")),
            f"{np.mean(list(alone.values())):,.0f}",
            *(f"{x:,.0f}" for x in (sjf_mean, start, best)),
            f"{base['continuum'] / best:.2f} / {base['cachettl'] / best:.2f}",
            f"{min(base.values()) / 1.4:,.0f}",
            f"{args.evaluations} ({kept} kept)",
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
