"""One assumption changed, offline: a request's first step costs more than the step line says.

On the CPU engine the steps in which a request computes its first chunk (a new request in
the model runner's batch, cold or after a cached prefix) ran a few ms slower than the line
fitted to the replay's steps, the other prefill steps a little faster (bench/RESULTS.md,
"a workload that resolves one point").  This script re-simulates recorded ``fidelity.py``
runs twice, on each replay's own fit and scatter (``own``, 32 jittered seeds):

* control: as ``fidelity.py`` does, except that a step holding a call's first chunk is planned
  as a step of its own (not as the first of a closed-form run), so that both arms draw the
  same number of step-time ratios;
* variant: the same, with the prefill line's residuals on the replay's steps regressed on the
  number of first chunks in a step (``s`` per first chunk, ``d0`` on every prefill step): a
  step with ``n`` first chunks costs ``n · s`` more, every prefill step ``d0`` more
  (``d0`` < 0: the line's intercept had absorbed the first chunks' cost).

It prints each run's stock and TTL hit-rate error (simulator mean − engine, points) in both
arms.  An experiment, not a change of the simulator: the step model knows no first chunk.

Run (the vLLM venv):
    PYTHONPATH=bench "$TTLPOLICY_VLLM_VENV/bin/python" \\
        bench/investigations/fidelity_first_step.py M1.json [M2.json ...]
"""

from __future__ import annotations

import fidelity  # isort: skip  (vLLM's environment first, as fidelity.py sets it)

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ttlpolicy.sim import engine as sim_engine
from ttlpolicy.sim.hardware import Hardware, Line, StepModel
from vllm_calibrate import SHAPES, EngineSettings


def first_chunks(chunks: list[list[tuple[int, int]]]) -> list[int]:
    """Per recorded step: how many prefill chunks are a request's first (their ``before`` is
    not where a chunk of the previous step ended)."""
    out, ends = [], set()
    for step in chunks:
        pre = [(n, b) for n, b in step if n > 1]
        out.append(sum(1 for n, b in pre if b not in ends))
        ends = {n + b for n, b in pre}
    return out


def first_step_cost(hw: Hardware, rows: list[Any], chunks: list[Any]) -> tuple[float, float]:
    """(s, d0): the prefill steps' residual (measured − modelled) regressed on their number of
    first chunks."""
    firsts = first_chunks(chunks)
    x, y = [], []
    for row, n_first in zip(rows, firsts, strict=True):
        tokens, attn, kv, seqs, measured = row
        if tokens != seqs:  # a step with a prefill chunk
            x.append([n_first, 1.0])
            y.append(measured - hw.steps.step_s(tokens, attn, kv, seqs))
    (s, d0), *_ = np.linalg.lstsq(np.array(x), np.array(y), rcond=None)
    return float(s), float(d0)


def shifted(hw: Hardware, d0: float) -> Hardware:
    """``hw`` with ``d0`` seconds added to every step that is not decode-only."""
    st = hw.steps

    def add(line: Line) -> Line:
        return dataclasses.replace(line, c0=line.c0 + d0)

    steps = StepModel(add(st.compute), add(st.memory), st.decode)
    return dataclasses.replace(hw, steps=steps)


class FirstStepPlans:
    """``Engine._plan`` patched for the run: a plan holding a call's first chunk is one step,
    charged ``surcharge_s`` per first chunk.  Calls are known by their admissions (the tokens
    they had computed then: their first chunk starts there)."""

    def __init__(self, surcharge_s: float) -> None:
        self.surcharge_s = surcharge_s
        self._plan = sim_engine.Engine._plan
        self.admitted_at: dict[int, int] = {}

    def __enter__(self) -> FirstStepPlans:
        me = self

        def plan(engine: Any, active: Any) -> Any:
            out = me._plan(engine, active)
            if out is None:
                return None
            dec, chunks, _, times = out
            n_first = 0
            for c, _ in chunks:
                if me.admitted_at.get(id(c)) == c.computed:
                    n_first += 1
                    del me.admitted_at[id(c)]
            if not n_first:
                return out
            step_s = times if isinstance(times, float) else times.s(1)
            return dec, chunks, 1, step_s + n_first * me.surcharge_s

        sim_engine.Engine._plan = plan  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        sim_engine.Engine._plan = self._plan  # type: ignore[method-assign]


class Admissions:
    """A policy whose admissions are noted for ``FirstStepPlans`` (a new one starts a new run:
    the admissions of the last are forgotten)."""

    def __init__(self, policy: Any, plans: FirstStepPlans) -> None:
        self._policy, self._plans = policy, plans
        plans.admitted_at.clear()

    def admitted(self, call: Any, now: float, cache_dropped: bool) -> None:
        self._plans.admitted_at[id(call)] = call.computed
        self._policy.admitted(call, now, cache_dropped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def hit_rate_mean(hw: Hardware, policy: str, programs: Any, settings: EngineSettings,
                  scatter: list[Any], seeds: int, surcharge_s: float,
                  concurrency: int | None) -> float:  # fmt: skip
    from ttlpolicy.sim.policies import make_policy

    with FirstStepPlans(surcharge_s) as plans:
        out = fidelity.replay_sim_jittered(
            hw, lambda: Admissions(make_policy(policy), plans), programs, settings, scatter,
            seeds, concurrency=concurrency,
        )  # fmt: skip
    return out["hit_rate"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--seeds", type=int, default=32)
    args = ap.parse_args(argv)
    errs: dict[tuple[str, str], list[float]] = {}
    for path in args.json:
        data = json.loads(Path(path).read_text())
        a = argparse.Namespace(**data["meta"]["args"])
        settings = EngineSettings(**data["meta"]["settings"])
        programs = fidelity.sim_programs(fidelity.workload_sessions(a), settings.block_size)
        concurrency = getattr(a, "concurrency", None)
        cells = []
        for run in fidelity.runs_from_json(data):
            hw = fidelity.fitted_profile(run["steps"], run["blocks"], settings, SHAPES[a.shape],
                                         "cpu")  # fmt: skip
            s, d0 = first_step_cost(hw, run["steps"], run["chunks"])
            engine = 100 * run["engine"]["hit_rate"]
            for arm, model, surcharge in (("control", hw, 0.0), ("variant", shifted(hw, d0), s)):
                sim = 100 * hit_rate_mean(model, run["policy"], programs, settings,
                                          run["steps"], args.seeds, surcharge,
                                          concurrency)  # fmt: skip
                errs.setdefault((run["scheduler"], arm), []).append(sim - engine)
                cells.append(f"{run['scheduler'][:5]} {arm} {sim - engine:+.2f}")
            cells.append(f"(s {1e3 * s:+.1f} ms, d0 {1e3 * d0:+.1f} ms)")
        print(f"{Path(path).stem}: " + "; ".join(cells), flush=True)
    for (sched, arm), xs in errs.items():
        print(f"{sched:<13} {arm:<8} hit-rate error mean {statistics.fmean(xs):+.2f} pt "
              f"over {len(xs)} runs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
