"""Which of the real engine's inputs moves the simulator's TTL error: on a recorded
``fidelity.py`` run (no engine), change one assumption of the simulator side and rerun it.

What the engine feeds the library that virtual time does not (``fidelity_logic.py`` is exact
there): the adapter's miss price fitted from real step times, tool gaps measured on the wall
clock (a return is added when the replay loop gets to it), and step times that drift over the
run where the simulator draws each step's scatter independently.  For each, on
``TTLScheduler`` against ``ttlpolicy:adapter`` and the run's own profile:

* ``price``: the adapter's miss price (``TTLPolicy.miss_cost_s`` at a few prefix sizes, mean
  over its samples) as the engine fed it — rebuilt from the recorded steps: each step's first
  chunks of newly scheduled calls, with the seconds the model executor took (what
  ``TTLScheduler`` measures between ``schedule`` and ``update_from_output``) — beside the same
  samples priced by the simulator's step-time model and the simulator's own (mean over seeds).
* resimulations, each against the engine's hit rate and first-call wait (load control's
  admission wait): as recorded; every tool gap ``--gap-add`` seconds longer; each return issued
  as late as the engine added it, beyond the simulator's own mean lateness (``lateness``);
  each step's scatter drawn from the engine's steps within ``--window-s`` of the same instant
  (``drift``); the miss price scaled by ``--price-scale`` (the lever's size).

Run (the vLLM venv: the profile is fitted as ``fidelity.py`` fits it):
    "$TTLPOLICY_VLLM_VENV/bin/python" bench/fidelity_causes.py R1.json [R2.json ...] \\
        [--seeds 16] [--jobs 2]
"""

from __future__ import annotations

import fidelity  # isort: skip  (vLLM's environment first, as fidelity.py sets it)

import argparse
import bisect
import contextlib
import dataclasses
import json
import multiprocessing
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ttlpolicy as tp
from fidelity_runs import error, mean_se_sd
from ttlpolicy.prefill_sample import step_prefill_sample
from ttlpolicy.sim.hardware import Hardware, JitteredSteps, StepModel, step_ratios
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from vllm_calibrate import SHAPES, EngineSettings

SCHEDULER = fidelity.TTL.rsplit(".", 1)[1]  # the run's key: the class's name
POLICY = "ttlpolicy:adapter"
PRICE_TOKENS = (500, 1000, 1500)
#: thresholds tried to tell the steps that ran the model (≥ ~7 ms) from empty ones: 1–10 ms
THRESHOLD_STEP_S = 0.00025
#: the median difference between a recorded row's duration and its timed step's (the timer
#: wraps the recorder's: ~0.03 ms) stays under this when they are matched
MATCH_S = 0.001

Chunks = Sequence[Sequence[int]]


def first_chunks(steps: Sequence[Chunks]) -> list[list[tuple[int, int]]]:
    """Per step, the chunks ``(new tokens, tokens before)`` that start a call: those that do
    not continue a chunk of the step before (one that ended where this one begins).  A step's
    chunks carry no request id; a new call whose cached prefix ends exactly where a running
    one's does would be missed (the simulator's sample count matches within a few)."""
    out, ends = [], set()
    for chunks in steps:
        out.append([(n, b) for n, b in chunks if b not in ends])
        ends = {n + b for n, b in chunks}
    return out


def engine_prices(data: dict[str, Any], seconds: Callable[[int], float]) -> list[list[float]]:
    """The adapter's price at ``PRICE_TOKENS`` after each sample it took on the engine, the
    sample's seconds ``seconds(step index)``."""
    s = data["steps"][SCHEDULER]
    cfg = tp.PolicyConfig.for_engine(None, data["meta"]["settings"]["token_budget"])
    policy = tp.TTLPolicy(cfg)
    out = []
    for i, firsts in enumerate(first_chunks(s["chunks"])):
        tokens, cached = step_prefill_sample(firsts)
        if tokens:
            policy.observe_prefill(tokens, seconds(i), cached)
            out.append([policy.miss_cost_s(n) for n in PRICE_TOKENS])
    return out


class _PriceLog:
    """The simulator's price after each sample its policy took (``stepped`` fed the fit)."""

    def __init__(self) -> None:
        self.prices: list[list[float]] = []

    def wrap(self, policy: TTLPolicyPlugin) -> TTLPolicyPlugin:
        stepped = policy.stepped

        def logged(chunks: Any, step_s: float) -> None:
            before = len(policy.unstarted_calls)
            stepped(chunks, step_s)
            if len(policy.unstarted_calls) < before:  # a first chunk ran: one sample
                self.prices.append([policy.ttl_policy.miss_cost_s(n) for n in PRICE_TOKENS])

        policy.stepped = logged  # type: ignore[method-assign]
        return policy


class DriftingSteps(JitteredSteps):
    """``JitteredSteps`` whose ratio is drawn from the engine's steps of the same kind that ran
    within ``window_s`` of the simulator's current instant (``clock()``), so the run's slow and
    fast stretches come where the engine's did; at least ``MIN_POOL`` steps are drawn from."""

    MIN_POOL = 5
    __slots__ = ("_clock", "_decode", "_other", "_window_s")
    _clock: Callable[[], float]
    _decode: list[tuple[float, float]]  # (instant, ratio), by instant
    _other: list[tuple[float, float]]
    _window_s: float

    def __init__(
        self,
        base: StepModel,
        timed: Sequence[tuple[float, float, bool]],
        seed: int,
        window_s: float,
        clock: Callable[[], float],
    ) -> None:
        decode = sorted((t, r) for t, r, d in timed if d)
        other = sorted((t, r) for t, r, d in timed if not d)
        super().__init__(base, [r for _, r in decode] or [1.0], [r for _, r in other] or [1.0],
                         seed)  # fmt: skip
        object.__setattr__(self, "_decode", decode or [(0.0, 1.0)])
        object.__setattr__(self, "_other", other or [(0.0, 1.0)])
        object.__setattr__(self, "_window_s", window_s)
        object.__setattr__(self, "_clock", clock)

    def _ratio(self, tokens: float, seqs: float) -> float:
        pool = self._decode if tokens == seqs else self._other
        now = self._clock()
        lo = bisect.bisect_left(pool, (now - self._window_s, -1.0))
        hi = bisect.bisect_right(pool, (now + self._window_s, float("inf")))
        if hi - lo < self.MIN_POOL:
            lo, hi = max(0, lo - self.MIN_POOL), min(len(pool), hi + self.MIN_POOL)
        return pool[self._rng.randrange(lo, hi)][1]


def model_steps(data: dict[str, Any]) -> list[tuple[float, float]]:
    """The timed steps (start, end) that ran the model, one per recorded row, in order.  The
    replay also times its empty steps (nothing scheduled while load control holds the queue,
    ~0.5 ms): the steps longer than the shortest threshold that leaves exactly as many steps
    as rows, their durations checked against the rows' (a row is timed inside its step)."""
    s = data["steps"][SCHEDULER]
    rows, timed = s["rows"], s["timeline"]["steps"]
    for i in range(4, 41):
        longer = [(a, b) for a, b in timed if b - a > i * THRESHOLD_STEP_S]
        if len(longer) == len(rows):
            diffs = sorted(abs((b - a) - r[-1]) for (a, b), r in zip(longer, rows, strict=True))
            if diffs[len(diffs) // 2] < MATCH_S:
                return longer
    raise ValueError(f"no threshold leaves {len(rows)} timed steps matching the recorded rows")


def timed_ratios(data: dict[str, Any], hw: Hardware) -> list[tuple[float, float, bool]]:
    """(instant, measured / modelled, decode-only) of each step the engine ran the model in,
    each kind's ratios scaled to mean 1 (as ``step_ratios``)."""
    rows = data["steps"][SCHEDULER]["rows"]
    out = [((a + b) / 2, r[-1] / hw.steps.step_s(*r[:4]), r[0] == r[3])
           for (a, b), r in zip(model_steps(data), rows, strict=True)]  # fmt: skip
    for kind in (True, False):
        ratios = [r for _, r, d in out if d == kind]
        if ratios:
            mean = statistics.fmean(ratios)
            out = [(t, r / mean if d == kind else r, d) for t, r, d in out]
    return sorted(out)


def fitted_profile(data: dict[str, Any]) -> Hardware:
    """The run's own profile, fitted to its TTL replay's steps as ``fidelity.py`` fits it."""
    rows = [tuple(r) for r in data["steps"][SCHEDULER]["rows"]]
    settings = EngineSettings(**data["meta"]["settings"])
    blocks = data["profiles"]["own"]["rows"][0]["kv_blocks"]
    return fidelity.fitted_profile(rows, blocks, settings, SHAPES[data["meta"]["args"]["shape"]],
                                   "cpu")  # fmt: skip


def resimulate(
    data: dict[str, Any],
    hw: Hardware,
    seeds: int,
    gap_add_s: float | dict[tuple[str, int], float] = 0.0,
    window_s: float = 0.0,
    price_scale: float = 1.0,
    prices: _PriceLog | None = None,
) -> dict[str, float]:
    """The simulator side of ``data``'s TTL run on its profile ``hw``, one assumption
    changed: mean hit rate, its sd between seeds, mean first-call wait (first token after
    issue), mean lateness."""
    a = data["meta"]["args"]
    settings = EngineSettings(**data["meta"]["settings"])
    sessions = fidelity.workload_sessions(argparse.Namespace(**a))
    programs = fidelity.sim_programs(sessions, settings.block_size)
    if gap_add_s:

        def added(pid: str, i: int) -> float:
            if isinstance(gap_add_s, dict):
                return gap_add_s.get((pid, i), 0.0)
            return gap_add_s if i else 0.0

        programs = [dataclasses.replace(p, turns=tuple(
            dataclasses.replace(t, think_s=t.think_s + added(p.program_id, i))
            for i, t in enumerate(p.turns))) for p in programs]  # fmt: skip
    rows = [tuple(r) for r in data["steps"][SCHEDULER]["rows"]]
    decode_ratios, other_ratios = step_ratios(hw.steps, rows)
    timed = timed_ratios(data, hw) if window_s > 0 else []
    think = {(p.program_id, i): t.think_s for p in programs for i, t in enumerate(p.turns)}
    hits, waits, late = [], [], []
    for seed in range(seeds):
        policy = make_policy(POLICY)
        assert isinstance(policy, TTLPolicyPlugin)

        def clock(policy: TTLPolicyPlugin = policy) -> float:
            return policy.view.now  # the engine's, once it has bound the policy

        steps: StepModel = (
            DriftingSteps(hw.steps, timed, seed, window_s, clock)
            if window_s > 0
            else JitteredSteps(hw.steps, decode_ratios, other_ratios, seed)
        )
        if price_scale != 1.0:
            fitted = policy.miss_cost_s

            def scaled(tokens: int, fitted: Callable[[int], float] = fitted) -> float:
                return price_scale * fitted(tokens)

            policy.miss_cost_s = scaled  # type: ignore[method-assign]
        if prices is not None:
            prices.wrap(policy)
        calls: list[dict[str, Any]] = []
        m = fidelity.replay_sim(dataclasses.replace(hw, steps=steps), policy, programs,
                                settings, calls, a.get("concurrency"))  # fmt: skip
        by = {(c["program"], c["turn"]): c for c in calls}
        hits.append(m["hit_rate"])
        waits.append(statistics.fmean(c["first_s"] - c["issue_s"] for c in calls if not c["turn"]))
        late.append(statistics.fmean(c["issue_s"] - by[p, t - 1]["finish_s"] - think[p, t]
                                     for (p, t), c in by.items() if t))  # fmt: skip
    return {
        "hit_rate": statistics.fmean(hits),
        "hit_rate_sd": statistics.pstdev(hits),
        "first_wait_s": statistics.fmean(waits),
        "lateness_s": statistics.fmean(late),
    }


def engine_side(data: dict[str, Any]) -> dict[str, float]:
    calls = data["steps"][SCHEDULER]["timeline"]["calls"]
    return {
        "hit_rate": sum(c["cached"] for c in calls) / sum(c["prompt"] for c in calls),
        "first_wait_s": statistics.fmean(
            c["first_s"] - c["issue_s"] for c in calls if not c["turn"]
        ),
        # a return's add_request after its due time: what the library's recorded gap exceeds
        # the tool's by
        "lateness_s": statistics.fmean(c["added_s"] - c["due_s"] for c in calls if c["turn"]),
    }


def _mean_prices(prices: list[list[float]]) -> str:
    cols = zip(*prices, strict=True)
    return " ".join(f"{1e3 * statistics.fmean(c):6.1f}" for c in cols) + f"  ({len(prices)})"


def _outcome(r: dict[str, float], engine_hit: float | None = None) -> str:
    err = "" if engine_hit is None else f", error {100 * (r['hit_rate'] - engine_hit):+.2f} pt"
    sd = f" (sd {100 * r['hit_rate_sd']:.2f}{err})" if "hit_rate_sd" in r else ""
    return (f"hit {100 * r['hit_rate']:.2f} %{sd}, first-call wait {r['first_wait_s']:.2f} s, "
            f"lateness {1e3 * r['lateness_s']:.1f} ms")  # fmt: skip


def report(
    path: str, seeds: int, gap_add_s: float, window_s: float, price_scale: float
) -> tuple[list[str], dict[str, float]]:
    """One run's lines, and its figures for the summary over runs: each variant's hit-rate
    error (points), and the simulator's price over the engine's at the largest size."""
    data = json.loads(Path(path).read_text())
    name = Path(path).stem
    s = data["steps"][SCHEDULER]
    rows = [tuple(r) for r in s["rows"]]
    hw = fitted_profile(data)
    log = _PriceLog()
    base = resimulate(data, hw, seeds, prices=log)
    head = " ".join(f"{n:>6}" for n in PRICE_TOKENS)
    executor = engine_prices(data, lambda i: s["model_s"][i])
    modelled = engine_prices(data, lambda i: hw.steps.step_s(*rows[i][:4]))
    lines = [f"{name}: the adapter's miss price, ms at {head} tokens (samples)"]
    for label, prices in (("engine, executor seconds", executor),
                          ("engine's steps, modelled seconds", modelled),
                          (f"simulator, {seeds} seeds", log.prices)):  # fmt: skip
        lines.append(f"  {label:<34} {_mean_prices(prices)}")
    eng = engine_side(data)
    extra = {
        (c["program"], c["turn"]): max(0.0, c["added_s"] - c["due_s"] - base["lateness_s"])
        for c in s["timeline"]["calls"] if c["turn"]
    }  # fmt: skip
    variants = [
        ("as recorded", base),
        (
            f"every tool gap +{1e3 * gap_add_s:.0f} ms",
            resimulate(data, hw, seeds, gap_add_s=gap_add_s),
        ),
        ("returns as late as the engine's", resimulate(data, hw, seeds, gap_add_s=extra)),
        (
            f"step scatter drawn within {window_s:g} s",
            resimulate(data, hw, seeds, window_s=window_s),
        ),
        (f"miss price × {price_scale:g}", resimulate(data, hw, seeds, price_scale=price_scale)),
    ]
    lines.append(f"  {'engine':<34} {_outcome(eng)}")
    figures = {"price ratio": statistics.fmean(p[-1] for p in log.prices)
               / statistics.fmean(p[-1] for p in executor)}  # fmt: skip
    for label, r in variants:
        lines.append(f"  {label:<34} {_outcome(r, eng['hit_rate'])}")
        figures[label] = error("hit_rate", eng["hit_rate"], r["hit_rate"])
    return lines, figures


def summary(figures: list[dict[str, float]]) -> list[str]:
    """Each variant's error over runs (mean ± s.e.), and how the as-recorded error follows the
    price ratio across runs."""
    n = len(figures)
    lines = [f"over {n} runs: hit-rate error, mean ± s.e. (sd)"]
    for label in figures[0]:
        if label == "price ratio":
            continue
        mean, se, sd = mean_se_sd([f[label] for f in figures])
        lines.append(f"  {label:<34} {mean:+.2f} ± {se:.2f} pt ({sd:.2f})")
    ratios = [f["price ratio"] for f in figures]
    r = statistics.correlation(ratios, [f["as recorded"] for f in figures])
    lines.append(f"  simulator's price / engine's at {PRICE_TOKENS[-1]} tokens: "
                 f"{min(ratios):.3f}-{max(ratios):.3f}, mean {statistics.fmean(ratios):.3f}; "
                 f"its correlation with the as-recorded error {r:+.2f}")  # fmt: skip
    return lines


def _report(args: tuple[str, int, float, float, float]) -> tuple[list[str], dict[str, float]]:
    return report(*args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="fidelity.py --json files (with timelines)")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--gap-add", type=float, default=0.012, help="seconds (default 12 ms)")
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--price-scale", type=float, default=0.9)
    ap.add_argument("--jobs", type=int, default=1, help="runs simulated in parallel")
    args = ap.parse_args(argv)
    work = [(p, args.seeds, args.gap_add, args.window_s, args.price_scale) for p in args.json]
    figures = []
    with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        for lines, figs in pool.imap(_report, work) if pool else map(_report, work):
            print("\n".join(lines), flush=True)
            figures.append(figs)
    if len(figures) > 2:
        print("\n".join(summary(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
