"""Step-time fits compared offline, on the steps a real engine ran (issue 11).

``bench/fidelity.py --json F`` records every step of its stock and TTL replays: each step's
(new tokens, tokens before) per request and its wall time (``calibrate.StepRecorder``).  This
script refits the simulator's step model on those rows, without the engine, in several forms,
and says how well each describes

* each replay's own steps (in sample), and
* the TTL replay's steps with the line fitted to the stock replay's (out of sample: what
  ``fidelity.py``'s replay-fitted profile does to the TTL scheduler),

in total seconds and split by kind (steps with a prefill chunk; decode-only steps).  Forms:

* ``line/1`` — c0 + c_tok·tokens + c_attn·attn + c_kv·kv (profile format /1: no per-sequence
  term);
* ``line/2`` — the same + c_seq·seqs (format /2, what ``fit_line`` fits now);
* ``line/2 rect`` — ``line/2`` with a chunk after k cached tokens priced as attending to all
  k + n (n·(k + n)) instead of the causal n·k + n(n + 1)/2: is the CPU kernel's attention
  causal-aware?  (A check only: the simulator's shape stays causal.)

Every fit is ``hardware.fit_line(relative=False)``, as ``fidelity.py`` fits a replay.

    python bench/investigations/step_fit_compare.py fidelity.json [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttlpolicy.sim.hardware import Line, fit_line
from ttlpolicy.sim.profile import step_shape

Chunks = list[list[int]]  # per request: [new tokens, tokens before]
Shape = tuple[float, float, float, float]


def causal(chunks: Chunks) -> Shape:
    """The simulator's step shape."""
    return step_shape((n, before) for n, before in chunks)


def no_seqs(chunks: Chunks) -> Shape:
    t, a, k, _ = causal(chunks)
    return t, a, k, 0.0


def rectangle(chunks: Chunks) -> Shape:
    t, _, k, q = causal(chunks)
    return t, float(sum(n * (before + n) for n, before in chunks)), k, q


FORMS: dict[str, Callable[[Chunks], Shape]] = {
    "line/1": no_seqs,
    "line/2": causal,
    "line/2 rect": rectangle,
}


def seconds_of(steps: dict[str, Any], clock: str) -> list[float]:
    """Each step's wall seconds (``wall``) or the process's CPU seconds in it (``cpu``)."""
    return [r[-1] for r in steps["rows"]] if clock == "wall" else list(steps["cpu_s"])


def rows_of(
    steps: dict[str, Any], form: Callable[[Chunks], Shape], clock: str
) -> list[tuple[float, ...]]:
    return [(*form(c), t) for c, t in zip(steps["chunks"], seconds_of(steps, clock), strict=True)]


def is_prefill(chunks: Chunks) -> bool:
    return any(n > 1 for n, _ in chunks)


def describe(line: Line, rows: list[tuple[float, ...]], chunks: list[Chunks]) -> dict[str, Any]:
    """Measured and modelled seconds, all steps and by kind, and the mean relative error."""
    out: dict[str, Any] = {}
    for kind, keep in (("all", lambda c: True), ("prefill", is_prefill),
                       ("decode", lambda c: not is_prefill(c))):  # fmt: skip
        sel = [r for r, c in zip(rows, chunks, strict=True) if keep(c)]
        measured = sum(r[-1] for r in sel)
        modelled = sum(line.at(*r[:4]) for r in sel)
        out[kind] = {
            "steps": len(sel),
            "measured_s": measured,
            "modelled_s": modelled,
            "error": (modelled - measured) / measured if measured else float("nan"),
        }
    errs = [abs(line.at(*r[:4]) - r[-1]) / r[-1] for r in rows if r[-1] > 0]
    out["mean_rel_error"] = statistics.fmean(errs)
    return out


def undisturbed(steps: dict[str, Any], min_cpu_per_wall: float) -> dict[str, Any]:
    """Only the steps during which the process kept ``min_cpu_per_wall`` CPUs busy.

    On the shared machine another job on one core stalls the engine's other thread at every
    OpenMP barrier: such a step takes several times as long, and its CPU time per wall
    second drops from ~2 (both engine threads computing) to ~1 (one spinning at the
    barrier).  The ratio tells the steps that measure the engine from those that measure the
    other job."""
    keep = [
        i
        for i, (r, c) in enumerate(zip(steps["rows"], steps["cpu_s"], strict=True))
        if r[-1] > 0 and c / r[-1] >= min_cpu_per_wall
    ]
    return {k: [steps[k][i] for i in keep] for k in ("rows", "cpu_s", "chunks")}


def compare(
    data: dict[str, Any], clock: str = "wall", min_cpu_per_wall: float = 0.0
) -> dict[str, Any]:
    steps = data["steps"]
    stock, ttl = steps["Scheduler"], steps["TTLScheduler"]
    if min_cpu_per_wall > 0:
        stock, ttl = undisturbed(stock, min_cpu_per_wall), undisturbed(ttl, min_cpu_per_wall)
    results: dict[str, Any] = {}
    for name, form in FORMS.items():
        rows = {"stock": rows_of(stock, form, clock), "ttl": rows_of(ttl, form, clock)}
        fits = {k: fit_line(v, relative=False) for k, v in rows.items()}
        results[name] = {
            "coefficients": {k: vars_of(v) for k, v in fits.items()},
            # the per-sequence slope of an unconstrained least-squares fit (fit_line drops a
            # negative term): how well the steps identify it at all
            "free_c_seq": {k: free_c_seq(v) for k, v in rows.items()},
            "stock in sample": describe(fits["stock"], rows["stock"], stock["chunks"]),
            "ttl in sample": describe(fits["ttl"], rows["ttl"], ttl["chunks"]),
            "stock fit on ttl": describe(fits["stock"], rows["ttl"], ttl["chunks"]),
        }
    return results


def free_c_seq(rows: list[tuple[float, ...]]) -> float:
    data = np.asarray(rows, dtype=float)
    x = np.column_stack([np.ones(len(data)), data[:, :4]])
    sol, *_ = np.linalg.lstsq(x, data[:, 4], rcond=None)
    return float(sol[4])


def vars_of(line: Line) -> dict[str, float]:
    return {f: getattr(line, f) for f in ("c0", "c_tok", "c_attn", "c_kv", "c_seq")}


def cell(d: dict[str, float]) -> str:
    return f"{d['measured_s']:6.2f} / {d['modelled_s']:6.2f} s {100 * d['error']:+5.1f} %"


def table(results: dict[str, Any]) -> str:
    head = (f"{'form':<12} {'case':<17} {'all: measured / modelled':>26} {'prefill steps':>22} "
            f"{'decode steps':>22} {'mean |err|':>10}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        for case in ("stock in sample", "ttl in sample", "stock fit on ttl"):
            d = r[case]
            cells = [cell(d[k]) for k in ("all", "prefill", "decode")]
            lines.append(f"{name:<12} {case:<17} {cells[0]:>26} {cells[1]:>22} {cells[2]:>22} "
                         f"{100 * d['mean_rel_error']:>8.0f} %")  # fmt: skip
        for label, c in r["coefficients"].items():
            lines.append(
                f"{'':<12} {label + ' fit':<17} c0 {1e3 * c['c0']:.2f} ms, c_tok "
                f"{1e6 * c['c_tok']:.1f} us, c_attn {1e9 * c['c_attn']:.2f} ns, c_kv "
                f"{1e9 * c['c_kv']:.1f} ns, c_seq {1e3 * c['c_seq']:.2f} ms "
                f"(unconstrained {1e3 * r['free_c_seq'][label]:+.2f} ms)"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("steps", help="a fidelity.py --json file (with each step's chunks)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="fit wall seconds per step, or the process's CPU seconds (recorded "
                    "with one engine thread: robust to other jobs on the machine)")  # fmt: skip
    ap.add_argument("--min-cpu-per-wall", type=float, default=0.0,
                    help="keep only steps whose CPU seconds per wall second reach this (1.8 "
                    "with the engine's 2 threads: steps no other job stalled)")  # fmt: skip
    ap.add_argument("--json", default=None, help="write the comparison here")
    args = ap.parse_args()
    data = json.loads(Path(args.steps).read_text())
    if "chunks" not in next(iter(data.get("steps", {}).values()), {}):
        print(f"{args.steps}: no per-step chunks (recorded before StepRecorder kept them)",
              file=sys.stderr)  # fmt: skip
        return 2
    results = compare(data, args.clock, args.min_cpu_per_wall)
    for name in ("Scheduler", "TTLScheduler"):
        s = data["steps"][name]
        kept = undisturbed(s, args.min_cpu_per_wall) if args.min_cpu_per_wall > 0 else s
        print(f"{name}: {len(kept['rows'])} of {len(s['rows'])} steps kept")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
