"""Which of the metrics' calls cost what inside a real vLLM CPU engine, exporter on and off
(issue 35: the side-by-side figure of ``bench/metrics_overhead.py`` said +11.9 % per
``schedule()`` where the calls timed alone explained 1.6 %).

The same block of agent work as ``bench/metrics_overhead.py`` runs ``--rounds`` times with the
exporter attached and detached in alternating order; every call of ``AdapterMetrics``' events
and publishing, of load control's ``working_set_blocks``, of vLLM's
``has_unfinished_requests``, of the adapter's ``_note_gauges`` and of its entry points
(``add_request``, ``schedule``, ``update_from_output``: vLLM's own work included) is timed by
the thread's CPU time (``--wall``: the wall clock), by a wrapper that costs ~1.3 us of reads
per call in both modes alike.  Prints, per call: how often, its time per call and per step,
off and on.  Works on the code before the fix too (no ``PrometheusExporter.observe`` there).

    cd adapters/vllm && PYTHONPATH=$PWD/../../python:$PWD/src:$PWD/../../bench \\
        "$VLLM_VENV/bin/python" ../../bench/investigations/metrics_pieces.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import metrics_overhead as mo
from ttlpolicy.serving import AdapterMetrics, PrometheusExporter
from vllm_engine import TEST_POLICY, build_tiny_model, make_engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--wall", action="store_true", help="time by perf_counter, not CPU time")
    cli = ap.parse_args()
    clock = time.perf_counter if cli.wall else time.thread_time
    os.environ.setdefault("TTLPOLICY_POLICY", TEST_POLICY)
    os.environ["TTLPOLICY_LOG_INTERVAL_S"] = "0"
    args = argparse.Namespace(programs=6, turns=5, blocks=40)
    acc: dict[str, list[float]] = {}

    def wrap(owner: Any, name: str, label: str) -> None:
        orig = getattr(owner, name)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return orig(*a, **k)
            finally:
                c = acc.setdefault(label, [0, 0.0])
                c[0] += 1
                c[1] += clock() - t0

        setattr(owner, name, timed)

    with tempfile.TemporaryDirectory() as d:
        engine = make_engine(build_tiny_model(Path(d)), mo.TTL, args.blocks)
        sched = engine.scheduler
        for name in ("arrived", "admitted", "decided", "publish", "publish_due"):
            wrap(AdapterMetrics, name, name)
        for name in ("add_request", "schedule", "update_from_output"):
            wrap(type(sched), name, name)  # (vLLM's own work included)
        wrap(type(sched.admission), "working_set_blocks", "working_set_blocks")
        wrap(type(sched), "_note_gauges", "_note_gauges")
        wrap(type(sched), "has_unfinished_requests", "has_unfinished_requests")
        if hasattr(PrometheusExporter, "observe"):
            wrap(PrometheusExporter, "observe", "exporter.observe")
        exporter = PrometheusExporter()
        mo.block(engine, args, "warm-up")
        out: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
        steps = {False: 0, True: 0}
        for rnd in range(cli.rounds):
            for on in (False, True) if rnd % 2 == 0 else (True, False):
                sched.ttl_metrics = sched.ttl_metrics.fresh()
                sched.ttl_metrics.exporter = exporter if on else None
                acc.clear()
                mo.block(engine, args, f"{rnd}{on}")
                steps[on] += sched.ttl_metrics.schedule_calls
                for k, (n, s) in acc.items():
                    o = out[on].setdefault(k, [0, 0.0])
                    o[0] += n
                    o[1] += s
    print(f"load average {os.getloadavg()}; steps off {steps[False]}, on {steps[True]}")
    print(f"{'call':24s} {'off: calls':>10s} {'us/call':>8s} {'us/step':>8s}   "
          f"{'on: calls':>10s} {'us/call':>8s} {'us/step':>8s}")  # fmt: skip
    for k in sorted(set(out[True]) | set(out[False])):
        row = [k.ljust(24)]
        for on in (False, True):
            n, s = out[on].get(k, [0, 0.0])
            row.append(f"{int(n):10d} {1e6 * s / max(n, 1):8.2f} {1e6 * s / steps[on]:8.2f}")
        print(" ".join(row[:1]) + " " + "   ".join(row[1:]))


if __name__ == "__main__":
    main()
