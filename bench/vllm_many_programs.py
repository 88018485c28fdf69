"""Load control under many programs: what one ``TTLScheduler.schedule()`` costs when P
never-ending programs sharing a 64-token prefix are known (bench/RESULTS.md, "Load control
under many programs").

vLLM's real scheduler, KV cache manager and block pool with no model
(``fidelity_logic.bare_scheduler``), on a virtual clock.  Each program sends one request (the
shared 64-token prefix and 16 tokens of its own, one output token) that ends with a call to
``bash`` and never comes back: the programs stay known, their shared prefix blocks stay
cached and free.  Then ``schedule()`` runs ``--steps`` times on the idle engine (each
followed by ``update_from_output``), the virtual clock moving 10 ms a step, and the median
wall time of one call is reported, with the adapter's tracked-program table.

    python bench/vllm_many_programs.py [--programs 100,5000,10000,20000] [--steps 200]
        [--no-evict-by-next-use] [--json out]

Run with the vLLM venv's Python and ``PYTHONPATH=python:adapters/vllm/src:bench``.
"""

from __future__ import annotations

# fidelity_logic sets vLLM's environment before vllm is imported.
import fidelity_logic  # isort: skip

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vllm_engine import build_tiny_model

PREFIX_TOKENS = 64
OWN_TOKENS = 16
BLOCK_SIZE = 16


def _step(sched: Any, advance: Any) -> Any:
    out = sched.schedule()
    sched.update_from_output(out, fidelity_logic._runner_output(sched, out))
    advance()
    return out


def measure(model_dir: Path, programs: int, steps: int, evict_by_next_use: bool) -> dict:
    """The median cost of one idle ``schedule()`` with ``programs`` programs known."""
    from vllm import SamplingParams

    os.environ["TTLPOLICY_POLICY"] = json.dumps({"evict_by_next_use": evict_by_next_use})
    os.environ["TTLPOLICY_LOG_INTERVAL_S"] = "0"
    os.environ["TTLPOLICY_METRICS"] = "0"
    # (the fields of fidelity_logic.Workload that bare_scheduler reads)
    w: Any = SimpleNamespace(
        blocks=4096, block_size=BLOCK_SIZE, max_seqs=256, token_budget=8192, max_model_len=128
    )
    sched = fidelity_logic.bare_scheduler(model_dir, "ttlpolicy_vllm.TTLScheduler", w)
    now = [0.0]

    def advance() -> None:
        now[0] += 0.01

    sched.clock = lambda: now[0]
    submit = fidelity_logic._Submitter(
        sched, BLOCK_SIZE, sched.clock, lambda: now.__setitem__(0, now[0] + 1e-6)
    )
    prefix = list(range(1, PREFIX_TOKENS + 1))
    for i in range(programs):
        own = [1000 + (i * OWN_TOKENS + k) % 30000 for k in range(OWN_TOKENS)]
        params = SamplingParams(max_tokens=1, extra_args={"program_id": f"p{i}", "tool": "bash"})
        submit.add_request(f"r{i}", {"prompt_token_ids": prefix + own}, params)
        if (i + 1) % 256 == 0 or i + 1 == programs:
            while sched.has_unfinished_requests():
                _step(sched, advance)
    walls = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = sched.schedule()
        walls.append(time.perf_counter() - t0)
        sched.update_from_output(out, fidelity_logic._runner_output(sched, out))
        advance()
    eviction = getattr(sched, "eviction", None)
    return {
        "programs": programs,
        "evict_by_next_use": evict_by_next_use,
        "schedule_median_us": statistics.median(walls) * 1e6,
        "schedule_p90_us": sorted(walls)[int(0.9 * len(walls))] * 1e6,
        "next_use_table_programs": None if eviction is None else len(eviction.programs()),
        "admission_programs": sched.admission.program_count if sched.admission else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="100,5000,10000,20000")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--no-evict-by-next-use", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny-llama")
        for n in (int(x) for x in args.programs.split(",")):
            row = measure(model_dir, n, args.steps, not args.no_evict_by_next_use)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"{'programs':>9} {'schedule() median us':>21} {'p90 us':>9} {'table':>7}")
    for r in rows:
        print(
            f"{r['programs']:>9} {r['schedule_median_us']:>21.1f} {r['schedule_p90_us']:>9.1f} "
            f"{r['next_use_table_programs']!s:>7}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
