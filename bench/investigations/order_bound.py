"""Is ≥ 1.4× against continuum and cachettl at seed 2's onset within reach of *any* policy?
(docs/investigations/bounds-folds-and-the-expected-working-set.md, "A stronger bound").

The ``clairvoyant`` bound serves programs first-come-first-served.  Mean completion time is
also lowered by serving short programs first, which needs each program's future length: this
probe gives the bound that foresight too (a subclass of the library's ``Clairvoyant``, only
its queue order changed):

* ``clairvoyant+sjf``: programs waiting to start in order of their total remaining work
  (shortest first); admitted programs' returns still by first arrival, ahead of them;
* ``clairvoyant+srpt``: returns too by their program's remaining work.

A program's remaining work, in prefill-token equivalents: the uncached prompt tokens of its
remaining calls plus ``--decode-weight`` times their output tokens.  ``--horizon-scales``:
the bounds again with load control's horizon (``n · rebuild_s``) scaled (1: as built).

    PYTHONPATH=python:bench python bench/investigations/order_bound.py \
        [--points 'llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003'] [--seeds 0,1,2,3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import sim_sweep
from agent_sweep import OPTIONS
from ttlpolicy.sim import make_policy, roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.policies.clairvoyant import Clairvoyant
from ttlpolicy.sim.workload import Turn


class ShortestFirst(Clairvoyant):
    def __init__(self, returns_too: bool, decode_weight: float, horizon_scale: float = 1.0) -> None:
        super().__init__(horizon_scale=horizon_scale)
        self._returns_too, self._w = returns_too, decode_weight
        self.name = "clairvoyant+srpt" if returns_too else "clairvoyant+sjf"

    def work(self, turns: Sequence[Turn]) -> float:
        """``turns``' work in prefill-token equivalents (uncached prompt + weighted output)."""
        b = self._block_tokens
        return sum(
            max(0, t.input_tokens - t.reusable_blocks * b) + self._w * t.output_tokens
            for t in turns
        )

    def rank(self, call: Call) -> float:
        """Where ``call`` waits among the calls of its kind (smallest first): its program's
        remaining work."""
        return self.work(call.prog.program.turns[call.turn_index :])

    def key(self, call: Call) -> tuple:
        # first calls after every admitted program's, as in the bound: a refused head must
        # not hold back the returns of the programs already running
        first = call.turn_index == 0 and not call.preempted
        rank = self.rank(call) if first or self._returns_too else 0.0
        return (not call.preempted, first, rank, call.program_arrival_s, call.issue_s, call.call_id)


def point_hardware(point: str) -> tuple[str, str, Any]:
    """``'<model>@<gpu>=<rate>'`` → (model, rate as written, the engine's roofline hardware)."""
    setup, _, rate = point.partition("=")
    model, gpu = setup.split("@")
    return model, rate, roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)


def jct_s(m: Any) -> dict[str, float]:
    """Each finished program's completion time, s (``Metrics`` of one run)."""
    return {p: end - m.program_start_s[p] for p, end in m.program_finish_s.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--decode-weight", type=float, default=10.0)
    ap.add_argument("--horizon-scales", default="1", help="e.g. 0.5,1,2: the bounds per scale")
    args = ap.parse_args()
    scales = [float(x) for x in args.horizon_scales.split(",")]
    programs = sim_sweep.load_sessions(None, OPTIONS)
    if programs is None:
        return 2
    bounds = {
        (f"{kind} ×{scale:g}" if scale != 1 else kind): (kind, scale)
        for scale in scales
        for kind in ("clairvoyant", "clairvoyant+sjf", "clairvoyant+srpt")
    }
    names = ["continuum", "cachettl", "ttlpolicy", *bounds]
    print("| point | seed | " + " | ".join(names) + " | best bound × continuum / cachettl |")
    print("|---" * (len(names) + 3) + "|")
    for point in args.points.split(";"):
        model, rate, hw = point_hardware(point)
        for seed in map(int, args.seeds.split(",")):
            mean: dict[str, float] = {}
            t = time.perf_counter()
            for name in names:
                policy: Any
                kind, scale = bounds.get(name, (name, 1.0))
                if kind.startswith("clairvoyant+"):
                    policy = ShortestFirst(kind.endswith("srpt"), args.decode_weight, scale)
                elif kind == "clairvoyant":
                    policy = Clairvoyant(horizon_scale=scale)
                else:
                    policy = make_policy(name)
                try:
                    m = simulate(hw, policy, programs, rate_per_s=float(rate), seed=seed)
                except RuntimeError as e:  # a variant may stall the engine: not a bound then
                    print(f"  {name}: {e}", file=sys.stderr)
                    mean[name] = float("nan")
                    continue
                mean[name] = float(np.mean(list(jct_s(m).values())))
            best = min(mean[n] for n in bounds if mean[n] == mean[n])
            print(f"| {model} {rate}/s | {seed} | "
                  + " | ".join(f"{mean[n]:,.0f}" if mean[n] == mean[n] else "stalls" for n in names)
                  + f" | {mean['continuum'] / best:.2f} / {mean['cachettl'] / best:.2f} |"
                  f"  ({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
