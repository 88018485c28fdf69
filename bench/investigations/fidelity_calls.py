"""Which calls the simulator gets wrong: ``fidelity.py``'s engine run and its simulator,
matched call by call.

Reads a ``fidelity.py --json`` file (it holds each engine call's due, issue, first-token and
finish instants and cached tokens, and the steps the profile was fitted to), simulates the
same programs again, each scheduler's side on a profile fitted to its own replay's steps
(``fidelity.py``'s ``own``), ``--seeds`` times with step times scattered as the engine's were
(``fidelity.replay_sim_jittered``), and prints, per scheduler and per kind of call, the
engine's cached tokens against the simulator's mean — so a bias is seen where it lives and
not through one chaotic trajectory.  Kinds: a program's first call, a return after a tool gap
under / over ``--short-gap-s`` (kinds fixed by the workload, not by either side's timing:
classing calls by the engine's own timing would select the engine's unlucky draws).  Also
the lateness on both sides (issued after the due time, waiting for a running step to end: the
engine's wall clock against the simulator's step ends).

Run (the vLLM venv: the profile is fitted as ``fidelity.py`` fits it):
    PYTHONPATH=bench "$TTLPOLICY_VLLM_VENV/bin/python" bench/investigations/fidelity_calls.py \\
        out.json [--seeds 32]
"""

from __future__ import annotations

import fidelity  # isort: skip  (vLLM's environment first, as fidelity.py sets it)

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from vllm_calibrate import SHAPES, EngineSettings

Key = tuple[str, int]


def engine_calls(data: dict[str, Any], scheduler: str) -> dict[Key, dict[str, Any]]:
    calls = data["steps"][scheduler]["timeline"]["calls"]
    return {(c["program"], c["turn"]): c for c in calls}


def sim_mean_cached(
    data: dict[str, Any], scheduler: str, policy: str, seeds: int
) -> tuple[dict[Key, float], dict[Key, float]]:
    """Per call: the simulator's cached tokens averaged over ``seeds`` jittered runs, and its
    lateness (issue after previous finish + gap) averaged likewise."""
    a = data["meta"]["args"]
    settings = EngineSettings(**data["meta"]["settings"])
    sessions = fidelity.workload_sessions(argparse.Namespace(**a))
    concurrency = a.get("concurrency")  # runs before --concurrency: all from the start
    programs = fidelity.sim_programs(sessions, settings.block_size)
    blocks = data["profiles"]["replay"]["rows"][0]["kv_blocks"]
    rows = [tuple(r) for r in data["steps"][scheduler]["rows"]]
    hw = fidelity.fitted_profile(rows, blocks, settings, SHAPES[a["shape"]], "cpu")
    gaps = {(p.program_id, i): t.think_s for p in programs for i, t in enumerate(p.turns)}
    per_seed: list[list[dict[str, Any]]] = []
    fidelity.replay_sim_jittered(hw, policy, programs, settings, rows, seeds, per_seed,
                                 concurrency)  # fmt: skip
    cached: dict[Key, list[float]] = {}
    late: dict[Key, list[float]] = {}
    for calls in per_seed:
        by = {(c["program"], c["turn"]): c for c in calls}
        for (p, t), c in by.items():
            cached.setdefault((p, t), []).append(c["cached"])
            if t:
                due = by[p, t - 1]["finish_s"] + gaps[p, t]
                late.setdefault((p, t), []).append(c["issue_s"] - due)
    mean = statistics.fmean
    return {k: mean(v) for k, v in cached.items()}, {k: mean(v) for k, v in late.items()}


def classify(eng: dict[Key, dict[str, Any]], short_gap_s: float) -> dict[str, list[Key]]:
    """Kinds of call: first calls, returns after a short or a long tool gap."""
    kinds: dict[str, list[Key]] = {"first call": [], "short gap": [], "long gap": []}
    for (p, t), c in eng.items():
        if t == 0:
            kinds["first call"].append((p, t))
            continue
        gap = c["due_s"] - eng[p, t - 1]["finish_s"]
        kinds["short gap" if gap < short_gap_s else "long gap"].append((p, t))
    return kinds


def report(data: dict[str, Any], seeds: int, short_gap_s: float) -> list[str]:
    lines = []
    for scheduler, policy in (("Scheduler", "vllm"), ("TTLScheduler", "ttlpolicy:adapter")):
        if scheduler not in data["steps"] or "timeline" not in data["steps"][scheduler]:
            continue
        eng = engine_calls(data, scheduler)
        sim_cached, sim_late = sim_mean_cached(data, scheduler, policy, seeds)
        lines.append(f"{scheduler} / {policy} ({seeds} jittered simulations)")
        lines.append(f"  {'kind':<14} {'calls':>5} {'prompt':>7} {'engine hit':>10} "
                     f"{'sim hit':>8} {'sim - eng':>9}")  # fmt: skip
        kinds = {"all": list(eng)} | classify(eng, short_gap_s)
        prompt_all = sum(c["prompt"] for c in eng.values())
        for kind, keys in kinds.items():
            prompt = sum(eng[k]["prompt"] for k in keys)
            e = sum(eng[k]["cached"] for k in keys)
            s = sum(sim_cached[k] for k in keys)
            share = 100 * (s - e) / prompt_all  # points of the whole run's hit rate
            lines.append(f"  {kind:<14} {len(keys):>5} {prompt:>7} {100 * e / prompt:>9.1f}% "
                         f"{100 * s / prompt:>7.1f}% {share:>+7.2f} pt")  # fmt: skip
        e_late = 1e3 * statistics.fmean(c["issue_s"] - c["due_s"] for (_, t), c in eng.items() if t)
        s_late = 1e3 * statistics.fmean(sim_late.values())
        lines.append(f"  lateness (issued after due, mean): engine {e_late:.1f} ms, "
                     f"simulator {s_late:.1f} ms")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a fidelity.py --json file (with timelines)")
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--short-gap-s", type=float, default=1.0)
    args = ap.parse_args(argv)
    data = json.loads(Path(args.json).read_text())
    print("\n".join(report(data, args.seeds, args.short_gap_s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
