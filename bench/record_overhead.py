"""What recording traffic (``TTLPOLICY_RECORD``) costs the vLLM adapter.

1. On the tiny real vLLM CPU engine (``vllm_engine``): ``TTLScheduler`` with the recorder on
   serves programs of several turns; the recording's time on the scheduler's thread
   (``CallLog``'s ``arrived`` and ``finished``, timed here from outside: noting arrivals,
   buffering finished calls; no step does recording work) is compared with the adapter's
   time (``adapter_s``, the recording's part included) over the same steps; the writer
   thread's time (the fields derived from the buffered references, digests, JSON, writes) is
   given beside it, wall and CPU.  Both sides are wall times (on a loaded machine they
   include the time the thread was not running), or with ``--cpu-time`` both the scheduler
   thread's CPU time (``time.thread_time``), so the share is CPU over CPU, not inflated by
   other processes' load.  This times ``CallLog``'s methods from outside, so it has a
   floor: ``--hollow`` (the methods empty) says what calling and timing them costs.
   ``--ab``: the same engine and share, measured as a difference instead (``ab_run``): half
   the calls recorded, and a narrow window of each call's adapter time (the recording and
   a few of the adapter's attribute reads) compared between recorded and unrecorded calls;
   no clock reading is added for the recording, so the timing's own cost cancels.
2. The same hot path on CPU time (``time.thread_time``: not inflated by other processes),
   microseconds per call, on real vLLM ``Request`` objects without the engine, and the
   writer's CPU time per call for the same calls.
3. The recorder's batch work alone on long prompts (the tiny engine's are <= 512 tokens):
   microseconds per call at 8k and 32k tokens in 16-token engine blocks (written in the
   caller's thread here, to time it), and that cost spread over the decode steps a call takes
   (``--output-tokens``).

Run with the vLLM venv:
  PYTHONPATH=python:adapters/vllm/src:bench <vllm venv>/bin/python bench/record_overhead.py
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import vllm_engine  # noqa: F401  (sets vLLM's environment before vllm is imported)


class CountingClock:
    """A clock that counts its readings: each timed section holds about one reading's cost
    (the end of its first, the start of its second), which ``read_cost_s`` prices."""

    def __init__(self, clock: Any) -> None:
        self.clock, self.reads = clock, 0

    def __call__(self) -> float:
        self.reads += 1
        return self.clock()

    def read_cost_s(self, n: int = 20000) -> float:
        """The least over 5 loops of one counted reading's cost, in the clock's own time."""
        best, reads = math.inf, self.reads
        for _ in range(5):
            t0 = self.clock()
            for _ in range(n):
                self()
            best = min(best, (self.clock() - t0) / n)
        self.reads = reads
        return best


#: ``CallLog``'s methods on the scheduler's thread (the clock readings they take are the
#: scheduler's own: ``TTLScheduler`` reads them for its lifecycle and metrics anyway)
HOT_METHODS = ("arrived", "finished")


def timed_call_log(clock: Any = time.perf_counter, hollow: bool = False) -> dict[str, float]:
    """Wrap ``CallLog``'s hot-path methods with ``clock``; returns their times (s), by
    method and in all (``"all"``), a dict that grows as they run.  ``hollow``: the methods
    do nothing (nothing is recorded): what the calls and their timing cost alone."""
    from ttlpolicy_vllm.recording import CallLog

    total = dict.fromkeys(("all", *HOT_METHODS), 0.0)

    def timed(method: Any) -> Any:
        name = method.__name__
        if hollow:
            method = _nothing

        def wrapper(log: Any, *args: Any) -> Any:
            t0 = clock()
            try:
                return method(log, *args)
            finally:
                spent = clock() - t0
                total["all"] += spent
                total[name] += spent

        return wrapper

    for name in HOT_METHODS:
        setattr(CallLog, name, timed(getattr(CallLog, name)))  # (patched for the run)
    return total


def _nothing(*args: Any) -> None:
    """A hollow ``CallLog`` method (``timed_call_log``)."""


def adapter_clock_swapped(base: Any) -> CountingClock:
    """The adapter times its sections with its module's ``time.perf_counter``: counted here,
    and with ``time.thread_time`` as ``base`` the scheduler thread's CPU time instead (the
    engine core runs in this thread), as bench/metrics_overhead.py --cpu-time does."""
    import types

    import ttlpolicy_vllm.scheduler as adapter

    clock = base if isinstance(base, CountingClock) else CountingClock(base)
    adapter.time = types.SimpleNamespace(perf_counter=clock, monotonic=time.monotonic)
    return clock


def recording_engine(tmp: Path) -> Any:
    """The tiny vLLM CPU engine on ``TTLScheduler``, recording into ``tmp``/rec."""
    import os

    from vllm_engine import build_tiny_model, make_engine

    os.environ["TTLPOLICY_RECORD"] = str(tmp / "rec")
    try:
        return make_engine(build_tiny_model(tmp / "model"), "ttlpolicy_vllm.TTLScheduler", 201)
    finally:
        del os.environ["TTLPOLICY_RECORD"]


def first_contexts(programs: int) -> dict[str, list[int]]:
    rng = random.Random(0)
    return {f"p{i}": [rng.randrange(3, 300) for _ in range(96)] for i in range(programs)}


def run_turn(engine: Any, contexts: dict[str, list[int]], output_tokens: int, last: bool) -> None:
    """One turn of every program, all at once, run to its end; each context grows by its
    output and 32 tokens (the last ones kept: prompts stay within the tiny model's 512)."""
    rids = {
        pid: engine.submit(ctx, output_tokens, program_id=pid, tool="bash", last_turn=last)
        for pid, ctx in contexts.items()
    }
    engine.run()
    for pid, rid in rids.items():
        out = engine.outputs[rid]
        contexts[pid] = (contexts[pid] + list(out.outputs[0].token_ids) + [7] * 32)[
            -(512 - output_tokens - 8) :
        ]


def engine_run(
    programs: int,
    turns: int,
    output_tokens: int,
    cpu_time: bool = False,
    warm_up_turns: int = 0,
    hollow: bool = False,
) -> dict[str, float]:
    """The recording's and the adapter's time per step over the turns after the first
    ``warm_up_turns`` (the recorder's one-off costs, its first file and first calls, fall in
    those): ``CallLog``'s methods timed from outside (``ab_run`` measures it as a difference)."""
    base = time.thread_time if cpu_time else time.perf_counter
    adapter_clock, record_clock = adapter_clock_swapped(base), CountingClock(base)
    busy_s = timed_call_log(record_clock, hollow)
    with tempfile.TemporaryDirectory() as tmp:
        engine = recording_engine(Path(tmp))
        contexts = first_contexts(programs)
        sched = engine.scheduler
        # the writer thread's own CPU clock: all its CPU, its waits and wake-ups included
        writer_thread = next(t for t in threading.enumerate() if t.name == "ttlpolicy-record")
        assert writer_thread.ident is not None
        writer_clock = time.pthread_getcpuclockid(writer_thread.ident)

        def snapshot() -> dict[str, float]:
            stats = sched.ttl_stats()
            return (
                {k: stats[k] for k in ("adapter_s", "schedule_calls")}
                | busy_s
                | {
                    "writer_s": sched.call_log.recorder.writer_s,
                    "writer_cpu_s": sched.call_log.recorder.writer_cpu_s,
                    "writer_thread_cpu_s": time.clock_gettime(writer_clock),
                    "adapter_reads": adapter_clock.reads,
                    "record_reads": record_clock.reads,
                }
            )

        start = dict.fromkeys(snapshot(), 0.0)
        for turn in range(turns):
            if turn == warm_up_turns:  # nothing in flight: count from here
                # (the warm-up's calls written now, the first file with them: not counted)
                sched.call_log.recorder.flush()
                start = snapshot()
            run_turn(engine, contexts, output_tokens, turn == turns - 1)
        end = snapshot()
        sched.call_log.close()  # (its last batch, in the writer thread: in writer_cpu_s)
        stats = sched.ttl_stats()
        recorded = busy_s["all"] - start["all"]
        calls = programs * (turns - warm_up_turns)
        by_method = {k: (busy_s[k] - start[k]) / calls * 1e6 for k in HOT_METHODS}
        writer = sched.call_log.recorder.writer_s - start["writer_s"]
        writer_cpu = end["writer_thread_cpu_s"] - start["writer_thread_cpu_s"]
        writer_cpu += sched.call_log.recorder.writer_cpu_s - end["writer_cpu_s"]
        engine.llm.llm_engine.engine_core.shutdown()
    steps = stats["schedule_calls"] - start["schedule_calls"]
    adapter_s = stats["adapter_s"] - start["adapter_s"]
    read_s = adapter_clock.read_cost_s()
    # less the clock's own readings, about one a timed section (two readings)
    adapter_net_s = adapter_s - (adapter_clock.reads - start["adapter_reads"]) / 2 * read_s
    record_net_s = recorded - (record_clock.reads - start["record_reads"]) / 2 * read_s
    return {
        "read_us": read_s * 1e6,
        "record_share_less_reads": record_net_s / adapter_net_s,
        # the writer thread's CPU beside it (meaningful with cpu_time): the whole cost
        "with_writer_share_less_reads": (record_net_s + writer_cpu) / adapter_net_s,
        "steps": steps,
        "calls": calls,
        **{f"{k}_us_per_call": v for k, v in by_method.items()},
        "adapter_us_per_step": adapter_s / steps * 1e6,
        "record_us_per_step": recorded / steps * 1e6,
        "record_share_of_adapter": recorded / adapter_s,
        "writer_us_per_step": writer / steps * 1e6,
        "writer_cpu_us_per_step": writer_cpu / steps * 1e6,
    }


class WindowClock(CountingClock):
    """The adapter's clock (``adapter_clock_swapped``), which also times windows: from
    ``open`` (a reading, with a tag) to the adapter's next reading, each window's time kept
    by its tag in ``samples`` (when not None) and ``closed`` called after the reading."""

    def __init__(self, clock: Any, closed: Any) -> None:
        super().__init__(clock)
        self.opened: float | None = None
        self.tag: Any = None
        self.closed = closed
        self.samples: dict[Any, list[float]] | None = None

    def __call__(self) -> float:
        self.reads += 1
        now = self.clock()
        if self.opened is not None:
            if self.samples is not None:
                self.samples.setdefault(self.tag, []).append(now - self.opened)
            self.opened = None
            self.closed()
        return now

    def open(self, tag: Any) -> None:
        self.tag = tag
        self.opened = self.clock()


def ab_run(
    programs: int, turns: int, output_tokens: int, cpu_time: bool, warm_up_turns: int
) -> dict[str, float]:
    """Recording's cost on the scheduler's thread as a difference: in one engine run each
    call is recorded or not (alternating by program and turn, so both arms see every program
    and every place in a step; ``call_log`` set to None for the calls not recorded), and the
    scheduler's thread CPU (or wall) time of two windows of each call is compared between
    the arms.  A window runs from the return of the last call the adapter makes before its
    recording code (``claim_pin`` at the arrival, ``ttl_metrics.gone`` at the finish) to
    the adapter's next clock reading, which ends its section: the recording (``CallLog``'s
    methods, however the adapter calls them) and a few attribute reads and stores of the
    adapter's.  Nothing times the recording itself and the timing is the same in both
    arms, so the difference is what recording adds, how it is called included.  The
    difference per call, over every call counted, against the adapter's time over the same
    steps is the recording's share; ``se``: its standard error (windows as samples)."""
    import ttlpolicy_vllm.scheduler as adapter
    from ttlpolicy_vllm.identity import scheduler_key

    sched: Any = None
    log: Any = None

    def restore() -> None:  # (after a window: every request's recording as configured)
        sched.call_log = log

    clock = WindowClock(time.thread_time if cpu_time else time.perf_counter, restore)
    adapter_clock_swapped(clock)
    with tempfile.TemporaryDirectory() as tmp:
        engine = recording_engine(Path(tmp))
        contexts = first_contexts(programs)
        sched = engine.scheduler
        log, metrics = sched.call_log, sched.ttl_metrics
        add, gone, claim_pin = sched.add_request, metrics.gone, adapter.claim_pin
        arm_of: dict[str, bool] = {}  # request key -> recorded?
        state: dict[str, Any] = {"arrivals": 0, "turn": 0, "arriving": None}

        def add_request(request: Any) -> None:
            on = (state["arrivals"] + state["turn"]) % 2 == 0
            state["arrivals"] += 1
            arm_of[scheduler_key(request.request_id)] = on
            sched.call_log, state["arriving"] = (log if on else None), on
            try:
                add(request)
            finally:
                sched.call_log, state["arriving"] = log, None

        def opening_claim_pin(*args: Any) -> Any:
            try:
                return claim_pin(*args)
            finally:
                if state["arriving"] is not None:
                    clock.open(("arrival", state["arriving"]))

        def opening_gone(key: str) -> None:
            gone(key)
            on = arm_of.pop(key, None)
            if on is not None:
                sched.call_log = log if on else None
                clock.open(("finish", on))

        sched.add_request, metrics.gone = add_request, opening_gone
        adapter.claim_pin = opening_claim_pin
        start: dict[str, float] = {}
        for turn in range(turns):
            if turn == warm_up_turns:
                log.recorder.flush()
                clock.samples = {}
                start = sched.ttl_stats()
            state["turn"], state["arrivals"] = turn, 0
            run_turn(engine, contexts, output_tokens, turn == turns - 1)
        stats = sched.ttl_stats()
        log.close()
        engine.llm.llm_engine.engine_core.shutdown()
    samples = clock.samples
    assert samples is not None
    steps = stats["schedule_calls"] - start["schedule_calls"]
    calls = programs * (turns - warm_up_turns)
    # (every counted call had both its windows: the hooks hold for this scheduler)
    assert sum(
        len(samples.get((k, on), [])) for k in ("arrival", "finish") for on in (False, True)
    ) == (2 * calls), {k: len(v) for k, v in samples.items()}
    out: dict[str, float] = {"calls": calls, "steps": steps}
    total, total_var = 0.0, 0.0
    for kind in ("arrival", "finish"):
        on, off = samples[(kind, True)], samples[(kind, False)]
        diff, var = _mean(on) - _mean(off), _var(on) / len(on) + _var(off) / len(off)
        out |= {f"{kind}_on_us": _mean(on) * 1e6, f"{kind}_off_us": _mean(off) * 1e6}
        out |= {f"{kind}_diff_us": diff * 1e6, f"{kind}_se_us": math.sqrt(var) * 1e6}
        total, total_var = total + diff, total_var + var
    # the adapter's time with no call recorded: the run's, less its recorded calls' part
    on_calls = len(samples[("finish", True)])
    adapter_off_s = stats["adapter_s"] - start["adapter_s"] - on_calls * total
    return out | {
        "adapter_us_per_step": adapter_off_s / steps * 1e6,
        "diff_us_per_call": total * 1e6,
        "se_us_per_call": math.sqrt(total_var) * 1e6,
        "record_us_per_step": total * calls / steps * 1e6,
        "share": total * calls / adapter_off_s,
        "share_se": math.sqrt(total_var) * calls / adapter_off_s,
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: list[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def hot_path_cpu_us(calls: int = 4000, rounds: int = 7) -> dict[str, float]:
    """CPU microseconds per call of ``CallLog``'s hot path (arrived, finished and buffered,
    each with the scheduler's clock reading it is handed), on real vLLM ``Request`` objects
    of 256 prompt tokens, the writer thread held off; then the writer's CPU per call
    (``writer``: the fields derived, digests, JSON, the write); the least of ``rounds``."""
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request, RequestStatus

    from ttlpolicy.ids import OPEN_TENANCY
    from ttlpolicy.serving import RecordSettings
    from ttlpolicy_vllm.identity import program_of
    from ttlpolicy_vllm.recording import CallLog

    init_none_hash(sha256_cbor)
    hasher = get_request_block_hasher(32, sha256_cbor)
    reqs = []
    for i in range(calls):
        params = SamplingParams(max_tokens=8, extra_args={"program_id": f"p{i % 8}"})
        r = Request(f"r{i}", list(range(3, 259)), params, None, block_hasher=hasher)
        r.status = RequestStatus.FINISHED_STOPPED
        reqs.append(r)
    infos = [program_of(r, OPEN_TENANCY) for r in reqs]
    best: dict[str, float] = {}
    clock = time.monotonic
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            log = CallLog(RecordSettings(Path(tmp)), 32, OPEN_TENANCY, clock)
            log.recorder.batch_calls, log.recorder.flush_interval_s = 1 << 30, 1e9
            t = [time.thread_time()]
            for r in reqs:
                log.arrived(r, clock())
            t.append(time.thread_time())
            for r, info in zip(reqs, infos, strict=True):
                log.finished(r, info, "bash", clock())
            t.append(time.thread_time())
            log.close()
        for name, a, b in zip(HOT_METHODS, t, t[1:], strict=False):
            best[name] = min(best.get(name, math.inf), (b - a) / calls * 1e6)
        best["writer"] = min(best.get("writer", math.inf), log.recorder.writer_cpu_s / calls * 1e6)
    best["total"] = sum(best[k] for k in HOT_METHODS)
    return best


def recorder_alone(prompt_tokens: int, calls: int, agentic: bool) -> float:
    """Microseconds per recorded call of ``prompt_tokens`` (16-token engine blocks).
    ``agentic``: 50 programs whose each call is its previous call's prompt with its last
    1024 tokens new (the shipped sessions' calls begin with their previous one's); else every
    call is new blocks of a new program (no digest reused)."""
    from ttlpolicy.serving import Recorder, RecordSettings

    blocks, fresh = prompt_tokens // 16, 1024 // 16
    base = [random.randbytes(32) for _ in range(blocks)]
    tails = [[random.randbytes(32) for _ in range(fresh)] for _ in range(8)]
    prompts: list[list[Any]] = [base[: blocks - fresh] + t for t in tails]
    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(
            RecordSettings(Path(tmp), 1 << 28, 4), engine_block_tokens=16, background=False
        )
        t0 = time.perf_counter()
        for i in range(calls):
            program = f"p{i % 50}" if agentic else f"p{i}"
            hashes = prompts[i % len(prompts)] if agentic else [random.randbytes(32), *base[1:]]
            rec.call(
                program_id=program,
                tenant="t",
                arrival_s=float(i),
                finish_s=i + 0.5,
                prompt_tokens=prompt_tokens,
                output_tokens=200,
                cached_tokens=prompt_tokens // 2,
                block_hashes=hashes,
                tool="bash",
            )
        rec.close()
        return (time.perf_counter() - t0) / calls * 1e6


def print_ab(r: dict[str, float], args: argparse.Namespace) -> None:
    clock = "CPU" if args.cpu_time else "wall"
    print(
        f"engine A/B ({clock} time, {args.output_tokens}-token calls): {r['calls']} calls "
        f"(half recorded), {r['steps']:.0f} steps; adapter {r['adapter_us_per_step']:.1f} "
        f"µs/step unrecorded; recording adds {r['diff_us_per_call']:+.2f} ± "
        f"{r['se_us_per_call']:.2f} µs a call = {r['record_us_per_step']:+.3f} µs/step = "
        f"{100 * r['share']:+.2f} ± {100 * r['share_se']:.2f} % of the adapter's time ("
        + ", ".join(
            f"{k} window {r[f'{k}_on_us']:.2f} vs {r[f'{k}_off_us']:.2f} µs"
            for k in ("arrival", "finish")
        )
        + ")"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--cpu-time", action="store_true", help="engine part: thread CPU time")
    ap.add_argument("--engine-only", action="store_true", help="skip parts 2 and 3")
    ap.add_argument("--warm-up-turns", type=int, default=0, help="turns not counted")
    ap.add_argument("--hollow", action="store_true", help="CallLog's methods do nothing: the floor")
    ap.add_argument(
        "--ab", action="store_true", help="engine part: recorded and unrecorded calls compared"
    )
    args = ap.parse_args()
    if args.ab:
        print_ab(
            ab_run(
                args.programs, args.turns, args.output_tokens, args.cpu_time, args.warm_up_turns
            ),
            args,
        )
        return
    r = engine_run(
        args.programs,
        args.turns,
        args.output_tokens,
        args.cpu_time,
        args.warm_up_turns,
        args.hollow,
    )
    clock = "CPU" if args.cpu_time else "wall"
    print(
        f"engine ({clock} time, {args.output_tokens}-token calls): {r['calls']} calls, "
        f"{r['steps']:.0f} steps; adapter "
        f"{r['adapter_us_per_step']:.1f} µs/step, recording {r['record_us_per_step']:.2f} "
        f"µs/step = {100 * r['record_share_of_adapter']:.2f} % of the adapter's time; "
        f"writer thread {r['writer_us_per_step']:.2f} µs/step wall, "
        f"{r['writer_cpu_us_per_step']:.2f} CPU; less the clock's "
        f"readings ({r['read_us']:.2f} µs each) {100 * r['record_share_less_reads']:.2f} %, "
        f"with the writer's CPU {100 * r['with_writer_share_less_reads']:.2f} %; "
        + ", ".join(f"{k} {r[f'{k}_us_per_call']:.2f}" for k in HOT_METHODS)
        + " µs per call"
    )
    if r["record_us_per_step"] == 0:
        print("  (nothing timed: this scheduler does not call CallLog's methods; --ab)")
    if args.engine_only:
        return
    hot = hot_path_cpu_us()
    print(
        "hot path, CPU time: " + ", ".join(f"{k} {v:.2f}" for k, v in hot.items()) + " µs per call"
    )
    for n in (8192, 32768):
        for agentic in (True, False):
            us = recorder_alone(n, 2000, agentic)
            kind = "last 1024 tokens new" if agentic else "all blocks new"
            print(
                f"recorder alone, {n}-token prompt, {kind}: {us:.1f} µs/call = "
                f"{us / args.output_tokens:.2f} µs per step of a {args.output_tokens}-token call"
            )


if __name__ == "__main__":
    main()
