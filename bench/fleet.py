"""Many engines behind a router (issue 31; docs/investigations/fleet-routers-draft.md): the
router × policy table on the agentic sessions cut to one task each (Poisson arrivals, as
bench/agent_sweep.py), at ``--instances`` engines and per-instance loads swept from light to
4× the contended point; and the same per-instance load on one engine, for the share of the
single-instance gain a router keeps.

    python bench/fleet.py [--instances 8] [--rates 0.002,0.004,0.008,0.016] \
        [--setups llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g] [--policies vllm,ttlpolicy] \
        [--routers round-robin,least-loaded,session-hash,prefix,ttlpolicy] [--json F]

``--rates`` are per instance (programs/s): the cluster gets ``instances`` × that.  The traces
are found as bench/sim_sweep.py says (``TTLPOLICY_TRACES``, default ``../shared/traces``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import sim_sweep  # bench/, beside this script: loads the sessions
from agent_sweep import OPTIONS
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.cluster import ROUTERS
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.run import simulate_cluster

SETUPS = "llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--rates", default="0.002,0.004,0.008,0.016", help="per instance, /s")
    ap.add_argument("--setups", default=SETUPS)
    ap.add_argument("--policies", default="vllm,ttlpolicy")
    ap.add_argument("--routers", default=",".join(ROUTERS))
    ap.add_argument("--no-single", action="store_true", help="skip the one-engine runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(args.trace, OPTIONS)
    if programs is None:
        return 2
    n = args.instances
    results = []
    for setup in args.setups.split(","):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for rate in (float(x) for x in args.rates.split(",")):
            for pol in args.policies.split(","):
                runs = [] if args.no_single else [None]
                for router in [*runs, *args.routers.split(",")]:
                    t = time.perf_counter()
                    if router is None:
                        m = simulate(hw, pol, programs, rate_per_s=rate, seed=args.seed)
                        per_instance = None
                    else:
                        m, per_instance = simulate_cluster(
                            hw, pol, programs, instances=n, router=router,
                            rate_per_s=rate * n, seed=args.seed,
                        )  # fmt: skip
                    wall = time.perf_counter() - t
                    s = m.summary()
                    results.append({
                        "setup": setup, "rate_per_instance": rate, "policy": pol,
                        "router": router, "instances": 1 if router is None else n,
                        "wall_s": wall, "summary": s, "per_instance": per_instance,
                    })  # fmt: skip
                    print(
                        f"{setup} {rate:g}/s/instance {pol} / {router or 'one engine'}: "
                        f"JCT {s['jct_mean_s']:,.0f} s p95 {s['jct_p95_s']:,.0f} s "
                        f"hit {s['hit_rate']:.2f} ({wall:.0f} s)",
                        flush=True,
                    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
