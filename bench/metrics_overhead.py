"""What the ``ttlpolicy_*`` Prometheus metrics add to ``TTLScheduler.schedule()``, side by side.

Two measurements in one run:

* **engine** — a real vLLM CPU engine (tiny model, in-process engine core) with
  ``TTLScheduler`` on a fake clock runs the same block of agent work (``block``: programs of
  several turns, tool gaps of a few steps) again and again, with the exporter attached and
  detached in alternating order for ``--rounds`` rounds; the adapter's own time per
  ``schedule()`` (``AdapterMetrics.adapter_us_per_schedule``, measured inside, publishing
  included) for each block.  The same steps each time, so the difference is the metrics'
  and the machine's noise, not the workload's (a wall-clock replay varied its step count
  tenfold on a loaded machine);
* **per call** — the metrics' own work, timed alone in the same process: one step's
  ``publish()`` (throttled: mostly the interval check; and forced, a publication) and a
  return's events (``arrived``, ``admitted``, ``decided``), with the exporter and without.
  Weighted by the replay's requests per step, this is the cost per ``schedule()`` the
  replay's difference should show, free of the engine's noise.

Run (uses the vLLM test venv; the in-process engine core writes to the client's registry;
``--multiproc`` measures the file-backed values vLLM's server uses; ``--cpu-time`` times the
adapter by its thread's CPU time, for a machine shared with other work; ``--control`` attaches
the exporter in both arms: what it prints is the noise floor of the side-by-side comparison):
    source scripts/vllm-env.sh && "$VLLM_VENV/bin/python" bench/metrics_overhead.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def per_call_us(exporter: Any, repeat: int) -> dict[str, float]:
    """Microseconds of one step's publish (as the adapters call it, throttled), of a return's
    events (``arrived``, ``admitted``, ``decided``: they keep their histogram values) and of
    one publication after a return (``publish(force=True)``: the return's counters, a gauge
    and its three histogram values; one every ``publish_interval_s`` at most), with the
    exporter and without."""
    from ttlpolicy.serving import AdapterMetrics

    m = AdapterMetrics(pin_budget_blocks=100, total_blocks=200, exporter=exporter)
    out = {}
    t0 = time.perf_counter()
    for i in range(repeat):
        m.schedule_calls += 1
        m.adapter_s += 1e-4
        m.pinned_blocks_now = i & 63
        m.publish()
    out["publish_us"] = 1e6 * (time.perf_counter() - t0) / repeat

    def events(i: int) -> None:
        pid, key = f"p{i & 255}", f"r{i}"
        m.arrived(pid, key, float(i), handed_over=bool(i & 1))
        m.admitted(pid, key, float(i) + 0.01, hit_tokens=64 if i & 1 else 0)
        m.decided(pid, float(i) + 0.5, ttl_s=12.0, pinned_blocks=4)

    t0 = time.perf_counter()
    for i in range(repeat):
        events(i)
    out["return_events_us"] = 1e6 * (time.perf_counter() - t0) / repeat
    m.publish(force=True)
    spent = 0.0
    for i in range(repeat):
        events(i)
        m.pinned_blocks_now = i & 63
        t0 = time.perf_counter()
        m.publish(force=True)
        spent += time.perf_counter() - t0
    out["publication_us"] = 1e6 * spent / repeat
    return out


TTL = "ttlpolicy_vllm.TTLScheduler"


def block(engine: Any, args: argparse.Namespace, tag: str) -> None:
    """One block of work, the same in every block: ``--programs`` programs of ``--turns``
    turns on the engine's fake clock (each step 50 ms); a turn decodes 8 tokens and calls a
    tool whose gap is 2-6 steps; programs start 2 steps apart."""
    rng = random.Random(0)
    vocab = 250
    context = {
        p: [rng.randrange(3, vocab) for _ in range(60 + 10 * p)] for p in range(args.programs)
    }
    turns = dict.fromkeys(range(args.programs), 0)
    due = {p: 2 * p for p in range(args.programs)}
    live: dict[str, int] = {}
    step = 0
    while turns and step < 100_000:
        for p in [p for p, d in due.items() if d <= step]:
            del due[p]
            last = turns[p] == args.turns - 1
            rid = engine.submit(context[p], 8, program_id=f"{tag}-p{p}", tool="bash",
                                last_turn=last)  # fmt: skip
            live[rid] = p
        if live:
            engine.step()
        for rid in [r for r in live if r in engine.outputs]:
            p = live.pop(rid)
            out = engine.outputs.pop(rid)
            turns[p] += 1
            if turns[p] == args.turns:
                del turns[p]
                continue
            context[p] = context[p] + list(out.outputs[0].token_ids)
            context[p] += [rng.randrange(3, vocab) for _ in range(20)]
            due[p] = step + rng.randint(2, 6)
        engine.clock.advance(0.05)
        step += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--programs", type=int, default=6)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=20_000, help="calls per per-call timing")
    ap.add_argument("--multiproc", action="store_true", help="PROMETHEUS_MULTIPROC_DIR set")
    ap.add_argument("--no-replay", action="store_true", help="per-call timings only")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="the adapter times itself by its thread's CPU time, not the wall clock",
    )
    ap.add_argument(
        "--control",
        action="store_true",
        help="A/A control: the exporter attached in both arms (the 'off' arm too), so the "
        "difference printed is the machine's noise floor for this many rounds",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.multiproc:  # before prometheus_client is imported: it picks its value class then
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ttlpolicy-prom-")
    from prometheus_client import CollectorRegistry

    from ttlpolicy.serving import PrometheusExporter

    calls = {
        "off": per_call_us(None, args.repeat),
        "on": per_call_us(PrometheusExporter(CollectorRegistry()), args.repeat),
    }
    replays: list[dict[str, Any]] = []
    if not args.no_replay:
        from vllm_engine import TEST_POLICY, build_tiny_model, make_engine

        os.environ.setdefault("TTLPOLICY_POLICY", TEST_POLICY)
        os.environ["TTLPOLICY_LOG_INTERVAL_S"] = "0"
        with tempfile.TemporaryDirectory() as d:
            engine = make_engine(build_tiny_model(Path(d)), TTL, args.blocks)
            sched = engine.scheduler
            if args.cpu_time:
                # On a shared machine the wall clock counts other processes' time in the
                # adapter's sections (2-5x swings between identical blocks); the thread's CPU
                # time does not (a read costs ~0.7 us here against perf_counter's ~0.1 us,
                # ~9 reads a step, in both modes alike).
                import types

                import ttlpolicy_vllm.scheduler as adapter

                adapter.time = types.SimpleNamespace(
                    perf_counter=time.thread_time, monotonic=time.monotonic
                )
            exporter = PrometheusExporter()
            block(engine, args, "warm-up")  # first steps pay one-off costs
            for rnd in range(args.rounds):
                for on in (False, True) if rnd % 2 == 0 else (True, False):
                    sched.ttl_metrics = sched.ttl_metrics.fresh()
                    sched.ttl_metrics.exporter = exporter if on or args.control else None
                    t0 = time.perf_counter()
                    block(engine, args, f"{rnd}{'on' if on else 'off'}")
                    wall_s = time.perf_counter() - t0
                    m = sched.ttl_metrics
                    replays.append(
                        {
                            "round": rnd,
                            "metrics": on,
                            "steps": m.schedule_calls,
                            "requests": args.programs * args.turns,
                            "adapter_us_per_schedule": m.adapter_us_per_schedule,
                            "wall_s": wall_s,
                            "pins": m.pins,
                            "hits": m.pinned_prefix_hits,
                        }
                    )
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"per_call": calls, "replays": replays, "loadavg": load}))
        return
    mode = "multiprocess (mmap files)" if args.multiproc else "in-memory registry"
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"per call, {mode}, {args.repeat} calls each:")
    for k in ("publish_us", "return_events_us", "publication_us"):
        print(f"  {k}: off {calls['off'][k]:.2f} us, on {calls['on'][k]:.2f} us")
    if not replays:
        return
    for r in replays:
        print(f"round {r['round']} metrics {'on ' if r['metrics'] else 'off'}: adapter "
              f"{r['adapter_us_per_schedule']:.1f} us/schedule over {r['steps']} steps, "
              f"pins {r['pins']}, pinned-prefix hits {r['hits']}")  # fmt: skip
    on_us = [r["adapter_us_per_schedule"] for r in replays if r["metrics"]]
    off_us = [r["adapter_us_per_schedule"] for r in replays if not r["metrics"]]
    mon, moff = statistics.median(on_us), statistics.median(off_us)
    print(f"median adapter us/schedule: off {moff:.1f}, on {mon:.1f} "
          f"({100 * (mon - moff) / moff:+.1f} %)")  # fmt: skip
    # Each round's two blocks ran back to back: their ratio cancels drift in the load.
    paired = [
        100 * (on["adapter_us_per_schedule"] / off["adapter_us_per_schedule"] - 1)
        for on, off in zip(
            (r for r in replays if r["metrics"]),
            (r for r in replays if not r["metrics"]),
            strict=True,
        )
    ]
    print(f"median of the rounds' on/off ratios: {statistics.median(paired):+.1f} % "
          f"(rounds: {', '.join(f'{x:+.0f}' for x in paired)})")  # fmt: skip
    # The metrics' own cost per step, from the per-call timings: a publish at every step
    # (throttled: mostly the interval check), a return's events once per request, and a
    # publication as AdapterMetrics.publish_due allows (0.5 s and 64 steps, or 4 s).
    from ttlpolicy.serving.metrics import (
        PUBLISH_INTERVAL_S,
        PUBLISH_MIN_STEPS,
        PUBLISH_STALE_INTERVALS,
    )

    publish = calls["on"]["publish_us"] - calls["off"]["publish_us"]
    events = calls["on"]["return_events_us"] - calls["off"]["return_events_us"]
    publication = calls["on"]["publication_us"]
    per_step = statistics.fmean(r["requests"] / r["steps"] for r in replays)
    step_s = statistics.median(r["wall_s"] / r["steps"] for r in replays)
    stale_steps = PUBLISH_STALE_INTERVALS * PUBLISH_INTERVAL_S / step_s
    rate = 1 / max(PUBLISH_INTERVAL_S / step_s, min(PUBLISH_MIN_STEPS, stale_steps))
    added = publish + events * per_step + publication * rate
    print(f"from the per-call timings: {publish:.2f} us (publish) + {events:.2f} us x "
          f"{per_step:.3f} requests/step (events) + {publication:.2f} us x {rate:.4f} "
          f"publications/step = {added:.2f} us per step, "
          f"{100 * added / moff:.1f} % of the adapter's {moff:.1f} us/schedule (off)")  # fmt: skip


if __name__ == "__main__":
    main()
