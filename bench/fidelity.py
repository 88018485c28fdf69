"""Simulator fidelity: one workload on a real vLLM engine and in ``ttlpolicy.sim``, side by side.

The workload is ``bench/vllm_replay.py``'s: N programs in flight, each replaying one shipped
sample session scaled to the small model (contexts to ``--max-context`` tokens, recorded tool
gaps × ``--time-scale``, capped), a KV cache of ``--blocks`` blocks so that programs compete.
It runs on the engine under vLLM's stock ``Scheduler`` and ``ttlpolicy_vllm.TTLScheduler``,
and in the simulator (policies ``vllm`` and ``ttlpolicy:adapter``) on a hardware profile calibrated
on the same engine (``bench/vllm_calibrate.py``; ``--profile`` reuses one) with the same KV
blocks, block size, token budget and maximum sequences — and on a second profile fitted to
the steps the stock replay itself ran (``StepRecorder``: each step's shape and wall time, under
the replay's own load; the TTL replay's steps are out of that fit's sample), which separates
the step-time model's error from the calibration's.  Every engine runs the calibration probe
once, unrecorded, before its replay (``warm_up``): a fresh engine runs slow for its first
minute.  ``--workload contended`` is a workload where the two schedulers differ by more than
the engine's run-to-run spread (``WORKLOADS``); ``contended-many`` has four times
``contended-long``'s calls with the same six programs in flight (``--concurrency``: each later
program starts when one ends, in the simulator's order), so one run resolves ~1.4 pt of hit
rate.

A third profile, ``own``, simulates each replay on a fit to its own steps (for when the
machine's speed changed between the two replays).  The simulator's figures are the mean of
``--jitter-seeds`` runs whose step times scatter as the fitted steps did around the fit
(``JitteredSteps``): the hit rate is a chaotic function of step timing, and one deterministic
run is one draw of it.  The JSON holds each call's timeline on both sides
(``fidelity_calls.py`` compares them by kind of call); ``--resimulate F`` runs the simulator
side again on a recorded run.

Per scheduler: mean and p90 TTFT, output throughput (tokens/s over the run), prefix hit rate,
mean program completion time, preemptions; the simulator's relative error on each (hit rate:
points); and whether the simulator orders the two schedulers as the engine does, per metric.

Run (the vLLM venv):
    "$TTLPOLICY_VLLM_VENV/bin/python" bench/fidelity.py [--json out.json]
"""

from __future__ import annotations

# vLLM's environment before vllm is imported; the engine and its model, shared with calibrate.
from vllm_calibrate import (  # isort: skip
    SHAPES,
    EngineSettings,
    Row,
    StepRecorder,
    add_engine_arguments,
    calibrate_llm,
    device_name,
    fit_rows,
    make_llm,
    probe,
    settings_from,
    usable_blocks,
    write_model_dir,
)

import argparse
import dataclasses
import gc
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fidelity_runs import error, same_order
from ttlpolicy.sim import EngineConfig, Hardware, load_profile, save_profile, simulate
from ttlpolicy.sim import Program as SimProgram
from ttlpolicy.sim import Turn as SimTurn
from ttlpolicy.sim.hardware import JitteredSteps, step_ratios
from ttlpolicy.sim.interface import Policy
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.workload import ConcurrencyArrivals
from vllm_replay import STOCK, TTL, Program, finish_turn, issue_due_turns, load_sessions
from vllm_replay import Turn as ReplayTurn

# engine scheduler, simulator policy (the TTL policy priced as the adapter prices a miss)
PAIRS = ((STOCK, "vllm"), (TTL, "ttlpolicy:adapter"))
METRICS = ("ttft_mean_s", "ttft_p90_s", "throughput_tok_s", "hit_rate", "jct_mean_s")


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[int(0.9 * (len(s) - 1))] if s else 0.0


class _Unobserved:
    """A ``TTLPolicy`` seen through its scheduler with ``observe_prefill`` switched off."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy

    def observe_prefill(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def warm_up(llm: Any, settings: EngineSettings) -> None:
    """Run the calibration probe once, unrecorded, so that every replay starts on an engine
    that has run each step shape and touched its KV cache.  A fresh engine's steps ran ~25 %
    slower than a warmed one's for the first two thirds of a replay (every kind of step
    alike), and only the first engine was warmed, by the calibration: the TTL replay paid it
    and the stock one did not.  The TTL scheduler's miss-cost model does not see these steps
    (the simulator's policy starts without them too)."""
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    policy = getattr(sched, "policy", None)
    if policy is not None:
        sched.policy = _Unobserved(policy)
    try:
        probe(llm, settings, repeats=1)
    finally:
        if policy is not None:
            sched.policy = policy


def arrival_order(sessions: list[list[ReplayTurn]], concurrency: int | None) -> list[int]:
    """The order in which the programs start when ``concurrency`` are in flight (None: all at
    once, in index order): the simulator's (``ConcurrencyArrivals``, seed 0), so that both
    sides start the same program when one ends."""
    if concurrency is None:
        return list(range(len(sessions)))
    arrivals = ConcurrencyArrivals(sim_programs(sessions, 1), concurrency, seed=0)
    started = arrivals.initial()
    while (nxt := arrivals.replacement()) is not None:
        started.append(nxt)
    return [int(p.program_id.removeprefix("prog")) for p in started]


class ProgramQueue:
    """The engine side of ``--concurrency``: the first ``concurrency`` programs of ``order`` are
    due at once, each later one when a program ends (the simulator's ``ConcurrencyArrivals``:
    the replacement starts at the instant the ended program's last call finished).
    ``programs`` lists them in that order: the replay issues the turns due at one instant in
    its list's order, and the first programs all start at 0 in the simulator's order."""

    def __init__(self, programs: list[Program], order: list[int], concurrency: int | None):
        ordered = [programs[i] for i in order]
        self.programs = ordered
        self._waiting = ordered[concurrency:] if concurrency is not None else []
        for p in self._waiting:
            p.due_s = math.inf  # not issued until it starts

    def finished(self, p: Program, now: float) -> None:
        """``p``'s turn finished at ``now`` (``finish_turn`` ran): start the next program if
        ``p`` is done."""
        if p.done_s is not None and self._waiting:
            self._waiting.pop(0).due_s = now


def replay_engine(
    llm: Any,
    sessions: list[list[ReplayTurn]],
    vocab: int,
    recorder: StepRecorder,
    concurrency: int | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Run the workload on ``llm`` (idle, empty prefix cache), ``concurrency`` programs in
    flight (None: all); the engine's measurements and its timeline (``calls``, ``steps``).
    Every step goes through ``recorder``."""
    engine = llm.llm_engine
    sched = engine.engine_core.engine_core.scheduler
    preemptions = 0
    preempt = sched._preempt_request

    def counted(*a: Any, **k: Any) -> Any:
        nonlocal preemptions
        preemptions += 1
        return preempt(*a, **k)

    sched._preempt_request = counted  # count every preemption, whatever the scheduler
    programs = [Program(f"prog{i}", s, random.Random(i)) for i, s in enumerate(sessions)]
    queue = ProgramQueue(programs, arrival_order(sessions, concurrency), concurrency)
    programs = queue.programs  # in start order: the first ones are issued in it at 0
    by_rid: dict[str, Program] = {}
    issued: dict[str, float] = {}
    ttfts: list[float] = []
    prompt_tokens = cached_tokens = output_tokens = 0
    # The run's timeline, for matching it call by call with the simulator's
    # (``fidelity_calls.py``): each call's due, issue, first-token and finish instants and its
    # cached tokens; each step's start and end on the same clock.
    calls: dict[str, dict[str, Any]] = {}
    steps: list[tuple[float, float]] = []
    t0 = time.monotonic()
    while any(p.done_s is None for p in programs):
        now = time.monotonic() - t0
        due = {p.pid: p.due_s for p in programs}
        for rid, p in issue_due_turns(engine, programs, now, vocab):
            by_rid[rid], issued[rid] = p, now
            calls[rid] = {"program": p.pid, "turn": p.next_turn, "due_s": due[p.pid],
                          "issue_s": now, "added_s": time.monotonic() - t0}  # fmt: skip
        if not engine.has_unfinished_requests():
            time.sleep(0.002)  # every program is in a tool call
            continue
        start = time.monotonic() - t0
        outs = recorder.step(engine)
        now = time.monotonic() - t0
        steps.append((start, now))
        for out in outs:
            if out.request_id in issued and out.outputs[0].token_ids:
                ttfts.append(now - issued.pop(out.request_id))
                calls[out.request_id]["first_s"] = now
            if not out.finished:
                continue
            p = by_rid.pop(out.request_id)
            prompt_tokens += len(out.prompt_token_ids or ())
            cached_tokens += out.num_cached_tokens or 0
            output_tokens += len(out.outputs[0].token_ids)
            calls[out.request_id] |= {"finish_s": now, "prompt": len(out.prompt_token_ids or ()),
                                      "cached": out.num_cached_tokens or 0}  # fmt: skip
            finish_turn(p, list(out.outputs[0].token_ids), now)
            queue.finished(p, now)
    pins = sched.ttl_stats()["pins"] if hasattr(sched, "ttl_stats") else 0
    makespan = max(p.done_s for p in programs if p.done_s is not None)
    jct = [p.done_s - p.first_s for p in programs]  # type: ignore[operator]
    return {
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p90_s": p90(ttfts),
        "throughput_tok_s": output_tokens / makespan,
        "hit_rate": cached_tokens / prompt_tokens if prompt_tokens else 0.0,
        "jct_mean_s": statistics.fmean(jct),
        "preemptions": float(preemptions),
        "makespan_s": makespan,
        "pins": float(pins),
    }, {"calls": list(calls.values()), "steps": steps}


def workload_sessions(args: Any) -> list[list[ReplayTurn]]:
    """``--programs`` sessions of ``--turns`` turns: the shipped sessions that have that many
    (``load_sessions``), taken again in order when there are fewer — eleven of the sixteen
    have 18 turns.  A repeat is a program of its own: its tokens are drawn from its own seed,
    so it shares no prefix with the first."""
    base = load_sessions(args.programs, args.turns, args.max_context, args.max_out,
                         args.time_scale, args.max_gap_s)  # fmt: skip
    return [base[i % len(base)] for i in range(args.programs)] if base else []


def sim_programs(sessions: list[list[ReplayTurn]], block_tokens: int) -> list[SimProgram]:
    """The same programs for the simulator: each turn's whole context, output, the blocks it
    shares with the previous turn's context (prompt + output, full blocks whose KV exists:
    the last output token's KV is never computed), and the gap before it."""
    programs = []
    for i, turns in enumerate(sessions):
        out, ctx, prev_kv = [], 0, 0
        for t in turns:
            ctx += t.new_tokens
            out.append(SimTurn(ctx, t.output_tokens, prev_kv // block_tokens, t.gap_s, "bash"))
            prev_kv = ctx + t.output_tokens - 1
            ctx += t.output_tokens
        programs.append(SimProgram(f"prog{i}", tuple(out)))
    return programs


class CallLog:
    """A simulator policy, unchanged, with each call's timeline noted as the engine's replay
    notes it (``replay_engine``): issue, admission (its cache hit then), first token, finish."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.calls: dict[tuple[str, int], dict[str, Any]] = {}

    def admitted(self, call: Any, now: float, cache_dropped: bool) -> None:
        if not call.preempted:  # the first admission holds the call's hit (as vLLM counts)
            self.calls[call.program_id, call.turn_index] = {
                "program": call.program_id, "turn": call.turn_index, "issue_s": call.issue_s,
                "admit_s": now, "prompt": call.prompt, "cached": call.computed,
            }  # fmt: skip
        self._policy.admitted(call, now, cache_dropped)

    def finished(self, call: Any, now: float, chain_blocks: int, last_turn: bool) -> Any:
        rec = self.calls[call.program_id, call.turn_index]
        rec["first_s"], rec["finish_s"] = call.first_token_s, now
        return self._policy.finished(call, now, chain_blocks, last_turn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def replay_sim(
    hw: Hardware,
    policy: str | Policy,
    programs: list[SimProgram],
    settings: EngineSettings,
    calls: list[dict[str, Any]] | None = None,
    concurrency: int | None = None,
) -> dict[str, float]:
    """The simulator's measurements, ``concurrency`` programs in flight (None: all from 0);
    each call's timeline appended to ``calls`` if given."""
    cfg = EngineConfig(settings.block_size, settings.token_budget, settings.max_seqs)
    log = CallLog(make_policy(policy) if isinstance(policy, str) else policy)
    if concurrency is None:
        m = simulate(hw, log, programs, open_loop=True, config=cfg)
    else:  # the engine's ProgramQueue starts them in this order (arrival_order)
        m = simulate(hw, log, programs, concurrency=concurrency, seed=0, config=cfg)
    if calls is not None:
        calls.extend(log.calls.values())
    ttfts = m.ttfts_s
    s = m.summary()
    return {
        "ttft_mean_s": s["ttft_mean_s"],
        "ttft_p90_s": p90(ttfts),
        "throughput_tok_s": s["throughput_tok_s"],
        "hit_rate": s["hit_rate"],
        "jct_mean_s": s["jct_mean_s"],
        "preemptions": s["preemptions"],
        "makespan_s": s["makespan_s"],
        "pinned_block_s": s["pinned_block_s"],
    }


def replay_sim_jittered(
    hw: Hardware,
    policy: str | Callable[[], Policy],
    programs: list[SimProgram],
    settings: EngineSettings,
    rows: list[Row],
    seeds: int,
    per_seed_calls: list[list[dict[str, Any]]] | None = None,
    concurrency: int | None = None,
) -> dict[str, float]:
    """``replay_sim``'s measurements averaged over ``seeds`` runs whose step times scatter as
    the engine's did around ``hw``'s fit (``JitteredSteps``, ratios from ``rows``), with their
    hit rate's spread (``hit_rate_sd``); each run's calls appended to ``per_seed_calls``.
    ``policy``: a name, or a factory called once per run (a policy keeps state).
    The engine's hit rate is an average over its steps' scatter; one deterministic run is one
    draw of it, and ±1 % on every step moves it by up to 5 points on ``contended-long``
    (bench/RESULTS.md, "why the hit rate read low")."""
    decode_ratios, other_ratios = step_ratios(hw.steps, rows)
    runs = []
    for seed in range(seeds):
        steps = JitteredSteps(hw.steps, decode_ratios, other_ratios, seed)
        calls: list[dict[str, Any]] = []
        jittered = dataclasses.replace(hw, steps=steps)
        pol = policy if isinstance(policy, str) else policy()
        runs.append(replay_sim(jittered, pol, programs, settings, calls, concurrency))
        if per_seed_calls is not None:
            per_seed_calls.append(calls)
    out = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
    return out | {
        "seeds": float(seeds),
        "hit_rate_sd": statistics.pstdev(r["hit_rate"] for r in runs),
    }


def errors(engine: dict[str, float], sim: dict[str, float]) -> dict[str, float]:
    """Relative error of the simulator (hit rate: difference in points)."""
    return {k: error(k, engine[k], sim[k]) for k in (*METRICS, "preemptions")}


def ranking(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Per metric: does the simulator order the two schedulers as the engine does?"""
    a, b = rows
    return {
        k: same_order(b["engine"][k] - a["engine"][k], b["sim"][k] - a["sim"][k])
        for k in (*METRICS, "preemptions")
    }


def table(rows: list[dict[str, Any]], agree: dict[str, bool]) -> str:
    head = f"{'scheduler':>14} {'metric':>17} {'engine':>10} {'sim':>10} {'error':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        for k in (*METRICS, "preemptions"):
            e, s, err = r["engine"][k], r["sim"][k], r["error"][k]
            unit = " pt" if k == "hit_rate" else "" if k == "preemptions" else " %"
            shown = err if k in ("hit_rate", "preemptions") else 100 * err
            lines.append(f"{r['scheduler']:>14} {k:>17} {e:>10.4g} {s:>10.4g} {shown:>+7.1f}{unit}")
    lines.append(
        "same ranking: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in agree.items())
    )
    return "\n".join(lines)


def step_fit(hw: Hardware, rows: list[Row]) -> dict[str, float]:
    """How well ``hw``'s step model describes measured steps (tokens, attn, kv, seqs, seconds):
    the mean relative error, and the measured and modelled total step time."""
    errs = [abs(hw.steps.step_s(*r[:4]) - r[4]) / r[4] for r in rows if r[4] > 0]
    return {
        "steps": len(rows),
        "mean_rel_error": statistics.fmean(errs) if errs else float("nan"),
        "measured_s": sum(r[4] for r in rows),
        "modelled_s": sum(hw.steps.step_s(*r[:4]) for r in rows),
    }


#: Named workloads (``--workload``): defaults for the flags, each still overridable.
#: ``contended`` makes a cache miss the larger part of a turn — contexts to 1,500 tokens (a
#: miss re-prefills three chunks of 512, ~1 s on the CPU engine), 8 output tokens — with a
#: KV cache of 120 blocks (3,840 tokens) for 6 programs of up to 1,500 each: stock vLLM
#: evicts a program's prefix during its tool call, the TTL scheduler pins it across.  In
#: virtual time on a CPU-fitted profile (``fidelity_logic.py --profile``) the two
#: schedulers differ by ~20 % in completion and ~25 % in TTFT, where ``default`` differs by
#: ~2 % (bench/RESULTS.md, issue 11, "a per-sequence step term").
#: ``contended-long`` is ``contended`` with 18 turns per program (108 calls instead of 36): one
#: call that hits on one side and not the other is ~1 pt of hit rate there, 2–3 pt on
#: ``contended``, too coarse to check a 1 pt target.
#: ``contended-many`` is ``contended-long`` four times over: 24 programs of 18 turns (432
#: calls), six in flight (``--concurrency``: each later program starts when one ends, in the
#: simulator's order), so the contention — six programs on 120 blocks — and each call's shape
#: — a session of 18 turns scaled to 1,500 tokens — are ``contended-long``'s; more turns per
#: program would scale each call smaller (the largest context of a session is what is scaled
#: to ``--max-context``), more programs at once would compete for the cache harder.  The
#: sessions with 18 turns are reused (``workload_sessions``).  The simulator's spread between
#: jittered seeds is ~half ``contended-long``'s (bench/RESULTS.md, "a workload that resolves
#: one point").
CONTENDED = {"max_context": 1500, "max_out": 8, "blocks": 120, "max_model_len": 1600}
WORKLOADS: dict[str, dict[str, Any]] = {
    "default": {},
    "contended": CONTENDED,
    "contended-long": {**CONTENDED, "turns": 18},
    "contended-many": {**CONTENDED, "turns": 18, "programs": 24, "concurrency": 6},
}


def fitted_profile(
    rows: list[Row], blocks: int, settings: EngineSettings, shape: Any, device: str
) -> Hardware:
    """A profile fitted (in seconds) to recorded steps, with exactly the engine's usable KV
    blocks."""
    hw = fit_rows(rows, shape, settings, device, blocks, relative=False)[0]
    kv_bytes = float(blocks * settings.block_size * hw.kv_bytes_per_token)
    return dataclasses.replace(hw, kv_capacity_bytes=kv_bytes)


def simulate_profiles(
    runs: list[dict[str, Any]],
    sessions: list[list[ReplayTurn]],
    settings: EngineSettings,
    shape: Any,
    device: str,
    probe: Hardware | None,
    probe_rows: list[Row],
    seeds: int,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The simulator against each engine run (``runs``: scheduler, policy, engine figures,
    usable blocks, recorded steps), on each profile, printed and returned.  Profiles:
    ``replay`` fitted to the stock replay's steps (the TTL replay's steps then out of sample),
    ``own`` each replay simulated on a fit to its own steps (for when the machine's speed
    changed between the two replays), ``probe`` the calibration (if any).  Each is jittered
    by the scatter of the steps it was fitted to (``replay_sim_jittered``)."""

    def fitted(rows: list[Row], blocks: int) -> Hardware:
        return fitted_profile(rows, blocks, settings, shape, device)

    stock = runs[0]
    stock_hw = fitted(stock["steps"], stock["blocks"])
    per_run: dict[str, list[tuple[Hardware, list[Row]]]] = {}
    if probe is not None:
        per_run["probe"] = [(probe, probe_rows)] * len(runs)
    per_run["replay"] = [(stock_hw, stock["steps"])] * len(runs)
    per_run["own"] = [(fitted(r["steps"], r["blocks"]), r["steps"]) for r in runs]
    programs = sim_programs(sessions, settings.block_size)
    results: dict[str, Any] = {}
    for pname, fits in per_run.items():
        rows = []
        for run, (hw, scatter) in zip(runs, fits, strict=True):
            # The simulator gets exactly the engine's usable KV blocks.
            kv_bytes = float(run["blocks"] * settings.block_size * hw.kv_bytes_per_token)
            sized = dataclasses.replace(hw, kv_capacity_bytes=kv_bytes)
            sim_calls: list[dict[str, Any]] = []
            single = replay_sim(sized, run["policy"], programs, settings, sim_calls,
                                concurrency)  # fmt: skip
            sim = single
            if seeds > 0 and scatter:
                sim = replay_sim_jittered(sized, run["policy"], programs, settings, scatter,
                                          seeds, concurrency=concurrency)  # fmt: skip
            rows.append({"scheduler": run["scheduler"], "policy": run["policy"],
                         "engine": run["engine"], "sim": sim, "sim_calls": sim_calls,
                         "sim_deterministic": single,
                         "error_deterministic": errors(run["engine"], single),
                         "error": errors(run["engine"], sim), "kv_blocks": run["blocks"],
                         "step_fit": step_fit(hw, run["steps"])})  # fmt: skip
        agree = ranking(rows)
        results[pname] = {"rows": rows, "same_ranking": agree}
        print(f"profile: {pname}")
        print(table(rows, agree))
        for r in rows:
            f = r["step_fit"]
            print(f"  {r['scheduler']} steps: {f['steps']}, measured {f['measured_s']:.2f} s, "
                  f"modelled {f['modelled_s']:.2f} s, mean step error "
                  f"{100 * f['mean_rel_error']:.0f} %")  # fmt: skip
            if "seeds" in r["sim"]:
                d = r["error_deterministic"]
                print(f"  {r['scheduler']} sim: mean of {r['sim']['seeds']:.0f} jittered runs "
                      f"(hit rate sd {100 * r['sim']['hit_rate_sd']:.1f} pt); one deterministic "
                      f"run: hit {d['hit_rate']:+.1f} pt, TTFT {100 * d['ttft_mean_s']:+.1f} %, "
                      f"completion {100 * d['jct_mean_s']:+.1f} %")  # fmt: skip
    return results


def runs_from_json(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine runs a ``--json`` file recorded, as ``main`` holds them (``--resimulate``)."""
    rows = data["profiles"]["replay"]["rows"]
    runs = []
    for r in rows:
        steps = data["steps"][r["scheduler"]]
        recorded = {k: steps.get(k, []) for k in ("model_s", "cpu_s", "chunks", "timeline")}
        runs.append({"scheduler": r["scheduler"], "policy": r["policy"], "engine": r["engine"],
                     "blocks": r["kv_blocks"], "steps": [tuple(x) for x in steps["rows"]]}
                    | recorded)  # fmt: skip
    return runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(ap)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="default",
                    help="named flag defaults: " + "; ".join(
                        f"{k}: {' '.join(f'--{f} {v}' for f, v in d.items()) or 'as below'}"
                        for k, d in WORKLOADS.items()))  # fmt: skip
    ap.add_argument("--profile", default=None, help="calibrated profile (default: calibrate now)")
    ap.add_argument("--no-probe", action="store_true",
                    help="no probe calibration: simulate on the replay-fitted profile")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=2, help="calibration: measurements per shape")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="replay on engines as built (only a calibrated one is warm)")  # fmt: skip
    ap.add_argument("--programs", type=int, default=6)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-context", type=int, default=400)
    ap.add_argument("--max-out", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=None,
                    help="programs in flight; each later one starts when one ends, in the "
                         "simulator's order (default: all from the start)")  # fmt: skip
    ap.add_argument("--time-scale", type=float, default=0.05)
    ap.add_argument("--max-gap-s", type=float, default=2.0)
    ap.add_argument("--jitter-seeds", type=int, default=32,
                    help="simulate this many times, each step's time scattered as the stock "
                         "replay's steps scattered around the profile, and compare the mean "
                         "(0: one deterministic run)")  # fmt: skip
    ap.add_argument("--resimulate", default=None, metavar="JSON",
                    help="no engine: simulate again the engine runs a --json file recorded "
                         "(with its workload flags; its probe profile is not in it)")  # fmt: skip
    ap.add_argument("--save-profile", default=None, help="write the calibrated profile here")
    ap.add_argument("--json", default=None, help="write the results here")
    chosen = ap.parse_known_args(argv)[0].workload
    ap.set_defaults(**WORKLOADS[chosen])
    return ap.parse_args(argv)


def resimulate(args: argparse.Namespace) -> int:
    """``--resimulate``: the simulator side again, on a recorded run's steps and figures."""
    data = json.loads(Path(args.resimulate).read_text())
    recorded = argparse.Namespace(**data["meta"]["args"])
    settings = EngineSettings(**data["meta"]["settings"])
    sessions = workload_sessions(recorded)
    runs = runs_from_json(data)
    device = device_name(recorded.device)
    concurrency = getattr(recorded, "concurrency", None)  # runs before --concurrency: None
    results = simulate_profiles(runs, sessions, settings, SHAPES[recorded.shape], device, None,
                                [], args.jitter_seeds, concurrency)  # fmt: skip
    if args.json:
        meta = data["meta"] | {"resimulated_from": args.resimulate,
                               "jitter_seeds": args.jitter_seeds}  # fmt: skip
        Path(args.json).write_text(
            json.dumps({"meta": meta, "profiles": results, "steps": data["steps"]}, indent=1) + "\n"
        )
    return 0


def main() -> int:
    args = parse_args()
    if args.resimulate:
        return resimulate(args)
    settings = settings_from(args)
    shape = SHAPES[args.shape]
    device = device_name(args.device)
    sessions = workload_sessions(args)
    if not sessions:
        print(f"no shipped session has {args.turns} turns", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    probe: Hardware | None = load_profile(args.profile) if args.profile else None
    record: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []  # per engine scheduler: its measurements and its recorded steps
    with tempfile.TemporaryDirectory() as d:
        model = write_model_dir(Path(d), shape)
        for cls, policy in PAIRS:
            llm = make_llm(model, shape, settings, cls)
            if probe is None and not args.no_probe:  # on the first engine, before its replay
                probe, record = calibrate_llm(llm, shape, settings, device,
                                              repeats=args.repeats)  # fmt: skip
                if args.save_profile:
                    save_profile(args.save_profile, probe, record)
                fit = 100 * record["fit_mean_rel_error"]
                print(f"calibrated in {record['measure_s']:.0f} s, fit error {fit:.1f} % mean",
                      file=sys.stderr)  # fmt: skip
            if not args.no_warm_up:
                warm_up(llm, settings)
            blocks = usable_blocks(llm)
            sched = llm.llm_engine.engine_core.engine_core.scheduler
            if hasattr(sched, "ttl_metrics"):
                sched.ttl_metrics = sched.ttl_metrics.fresh()  # count the replay only
            vocab = min(500, len(llm.get_tokenizer()))
            recorder = StepRecorder(llm)
            engine, timeline = replay_engine(llm, sessions, vocab, recorder, args.concurrency)
            llm.llm_engine.engine_core.shutdown()
            del llm, sched
            gc.collect()
            name = cls.rsplit(".", 1)[1]
            runs.append({"scheduler": name, "policy": policy, "engine": engine, "blocks": blocks,
                         "steps": recorder.rows, "model_s": recorder.model_s,
                         "cpu_s": recorder.cpu_s, "chunks": recorder.chunks,
                         "timeline": timeline})  # fmt: skip
            print(f"{name}: engine done", file=sys.stderr)
    results = simulate_profiles(runs, sessions, settings, shape, device, probe,
                                record.get("rows") or [], args.jitter_seeds,
                                args.concurrency)  # fmt: skip
    for run in runs:
        total = sum(r[4] for r in run["steps"])
        share = sum(run["model_s"]) / total if total else float("nan")
        print(f"{run['scheduler']}: {100 * share:.0f} % of step time in the model executor")
    if args.json:
        meta = {
            "args": vars(args),
            "settings": dataclasses.asdict(settings),
            "requests": sum(len(s) for s in sessions),
            "programs": len(sessions),
            "wall_s": time.perf_counter() - t_start,
            "calibration": {k: v for k, v in record.items() if k != "rows"},
        }
        steps = {
            r["scheduler"]: {"rows": r["steps"]}
            | {k: r[k] for k in ("model_s", "cpu_s", "chunks", "timeline")}
            for r in runs
        }
        Path(args.json).write_text(
            json.dumps({"meta": meta, "profiles": results, "steps": steps}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
