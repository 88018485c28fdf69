"""Load sweep of every simulated policy on the agentic dev sessions (bench/RESULTS.md,
"Simulator: closed loop").  Deterministic: rerun to reproduce the tables.

    python bench/sim_sweep.py [--trace DIR] [--loads 2,4,8] [--ids explicit] [--common-prefix]
        [--json out]

``--trace`` defaults to ``claude-code/`` under ``TTLPOLICY_TRACES`` (default ``../shared/traces``
beside the repository).

Parsing the 471 sessions takes a minute or two the first time; ``programs_from_trace`` keeps
the parsed programs in the library's trace cache (``ttlpolicy.traces.cache``, keyed by the
files' contents and the options), so a rerun loads them in seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trace_paths import missing_message, traces_dir
from ttlpolicy.cli import add_common_prefix_argument, add_ids_argument
from ttlpolicy.sim import programs_from_trace, roofline, simulate
from ttlpolicy.sim.policies.ttlpolicy_plugin import with_ids
from ttlpolicy.sim.report import format_table

POLICIES = "vllm,vllm-offload,infercept,autellix,fixed-ttl=5,continuum,ttlpolicy,ttlpolicy-offload"
SETUPS = (("llama-3.1-8b", "h100-80g"), ("llama-3.1-70b", "h100-80g"))
OPTIONS = {"max_context": 120_000, "think_cap_s": 300.0}


def load_sessions(trace_arg: str | None, options: dict | None = None, common_prefix: bool = False):
    """The agentic sessions (``--trace``, else ``claude-code/`` under ``TTLPOLICY_TRACES``),
    loaded with a line on stderr; None, after saying why, when the folder is missing.
    ``common_prefix``: with the prefix every session shares (``--common-prefix``)."""
    trace = Path(trace_arg) if trace_arg else traces_dir() / "claude-code"
    if not trace.exists():
        print(missing_message(trace), file=sys.stderr)
        return None
    t0 = time.perf_counter()
    options = dict(OPTIONS if options is None else options)
    if common_prefix:
        options["common_prefix"] = True
    programs = programs_from_trace(str(trace), **options)
    print(
        f"{len(programs)} programs, {sum(len(p.turns) for p in programs)} calls "
        f"(loaded in {time.perf_counter() - t0:.0f} s)",
        file=sys.stderr,
    )
    return programs


def policies_with_ids(policies: str, ids: str) -> str:
    """The comma-separated ``policies`` with ``--ids`` applied to the ttlpolicy ones."""
    return ",".join(with_ids(p, ids) for p in policies.split(","))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see above)")
    ap.add_argument("--loads", default="2,4,8", help="programs in flight")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--setups", default=",".join(f"{m}@{g}" for m, g in SETUPS))
    ap.add_argument("--json", default=None)
    add_ids_argument(ap)
    add_common_prefix_argument(ap)
    args = ap.parse_args()
    args.policies = policies_with_ids(args.policies, args.ids)
    programs = load_sessions(args.trace, common_prefix=args.common_prefix)
    if programs is None:
        return 2
    results = []
    for setup in args.setups.split(","):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * hw_gpus(model))
        for n in (int(x) for x in args.loads.split(",")):
            rows = []
            for pol in args.policies.split(","):
                t = time.perf_counter()
                s = simulate(hw, pol, programs, concurrency=n).summary()
                wall = time.perf_counter() - t
                rows.append((pol, s))
                results.append(
                    {
                        "model": model,
                        "gpu": gpu,
                        "concurrency": n,
                        "policy": pol,
                        "wall_s": wall,
                        "summary": s,
                    }
                )
                print(f"  {model} {gpu} c={n} {pol}: {wall:.1f} s", file=sys.stderr, flush=True)
            print(f"\n{model} on {hw.model.tp}× {gpu}, {n} programs in flight")
            print(format_table(rows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def hw_gpus(model: str) -> int:
    from ttlpolicy.sim.hardware import MODELS

    return MODELS[model].tp


if __name__ == "__main__":
    sys.exit(main())
