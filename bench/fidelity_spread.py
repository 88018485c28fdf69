"""What one engine run of a workload can resolve: the simulator's spread between jittered seeds.

``fidelity.py`` compares the engine's hit rate with the mean of ``--jitter-seeds`` simulations
whose step times scatter as the engine's did (``replay_sim_jittered``).  The engine's run is one
draw of that scatter, so the seeds' standard deviation is the resolution of one engine run.
This script takes the profiles recorded runs were fitted to (each replay's own steps and their
scatter, ``fidelity.py``'s ``own``) and simulates any named workload on them, so that two
workloads' resolutions are compared on the same profiles, with no engine.

Run (the vLLM venv: the profile is fitted as ``fidelity.py`` fits it):
    "$TTLPOLICY_VLLM_VENV/bin/python" bench/fidelity_spread.py F.json [G.json ...] \\
        --workloads contended-long,contended-many [--seeds 32]
"""

from __future__ import annotations

import fidelity  # isort: skip  (vLLM's environment first, as fidelity.py sets it)

import argparse
import json
import statistics
import sys
from pathlib import Path

from vllm_calibrate import SHAPES, EngineSettings


def spread(path: str, workload: str, seeds: int) -> dict[str, tuple[float, float]]:
    """Per scheduler of the recorded run: the simulator's mean hit rate and its standard
    deviation between ``seeds`` jittered runs of ``workload``, on that replay's own fit."""
    data = json.loads(Path(path).read_text())
    settings = EngineSettings(**data["meta"]["settings"])
    shape = SHAPES[data["meta"]["args"]["shape"]]
    wargs = fidelity.parse_args(["--workload", workload])
    programs = fidelity.sim_programs(fidelity.workload_sessions(wargs), settings.block_size)
    out = {}
    for run in fidelity.runs_from_json(data):
        hw = fidelity.fitted_profile(run["steps"], run["blocks"], settings, shape, "cpu")
        sim = fidelity.replay_sim_jittered(hw, run["policy"], programs, settings, run["steps"],
                                           seeds, concurrency=wargs.concurrency)  # fmt: skip
        out[run["scheduler"]] = (sim["hit_rate"], sim["hit_rate_sd"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="fidelity.py --json files (their steps)")
    ap.add_argument("--workloads", default="contended-long,contended-many")
    ap.add_argument("--seeds", type=int, default=32)
    args = ap.parse_args(argv)
    workloads = args.workloads.split(",")
    sds: dict[tuple[str, str], list[float]] = {}
    print(f"{'run':<10} {'scheduler':<13} " + " ".join(f"{w:>26}" for w in workloads))
    for path in args.json:
        per = {w: spread(path, w, args.seeds) for w in workloads}
        for sched in per[workloads[0]]:
            cells = []
            for w in workloads:
                hit, sd = per[w][sched]
                sds.setdefault((sched, w), []).append(sd)
                cells.append(f"hit {100 * hit:5.1f} %, sd {100 * sd:4.2f} pt")
            print(f"{Path(path).stem:<10} {sched:<13} " + " ".join(f"{c:>26}" for c in cells))
    for (sched, w), xs in sds.items():
        print(f"mean sd {sched:<13} {w:<16} {100 * statistics.fmean(xs):.2f} pt "
              f"({100 * min(xs):.2f}-{100 * max(xs):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
