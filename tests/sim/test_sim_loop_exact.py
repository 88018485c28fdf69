"""The engine's loop shortcuts change no result: whole simulations on the shipped sessions give
the same metrics, to the last bit, as the plain computations the shortcuts stand for.

The shortcuts (``bench/RESULTS.md``, "Tier planner", speed): a single step is timed by
``StepModel.step_s`` instead of a ``StepRun`` (``Engine.one_step_shortcut``);
``EngineView.prefill_s`` adds a prefill's whole chunks, memoised by their count, to its last
chunk.  The plain path here times every step through a ``StepRun`` and asks the hardware's
chunk loop for every prefill.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from trace_files import DATA
from ttlpolicy.sim import Engine, programs_from_records, roofline
from ttlpolicy.sim.engine import _View
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.workload import ConcurrencyArrivals, poisson_arrivals
from ttlpolicy.traces import read_trace

PROGRAMS = programs_from_records(
    read_trace(DATA / "sessions"), max_context=120_000, context_mode="truncate", think_cap_s=300.0
)


def plain_prefill_s(view: _View, tokens: int) -> float:
    return view.hardware.prefill_s(tokens, view.config.token_budget)


def run(policy: str, load: str, *, plain: bool):
    hw = roofline("llama-3.1-8b", "h100-80g", cpu_tier_bytes=64e9)
    engine = Engine(hw, make_policy(policy))
    engine.one_step_shortcut = not plain
    if load == "closed":
        engine.use_concurrency(ConcurrencyArrivals(PROGRAMS, 8, 0))
    else:
        engine.add_programs(poisson_arrivals(PROGRAMS, 0.05, 0))
    return engine.run()


@pytest.mark.parametrize("load", ["closed", "poisson"])
@pytest.mark.parametrize(
    "policy", ["vllm", "vllm-offload", "continuum", "cachettl", "ttlpolicy", "ttlpolicy-offload"]
)
def test_loop_shortcuts_give_the_plain_results(
    policy: str, load: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(policy, load, plain=False)
    monkeypatch.setattr(_View, "prefill_s", plain_prefill_s)
    plain = run(policy, load, plain=True)
    assert fast.calls_done == sum(len(p.turns) for p in PROGRAMS)
    # every field, floats compared exactly (a dataclass compares its fields with ==)
    assert fast == plain


def same_but_rounding(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-12 relative: a run kept whole sums its steps' times in one closed
    form, where the same steps split into two runs sum in two (the last bits differ)."""
    if isinstance(a, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-12)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same_but_rounding, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_but_rounding(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize("load", ["closed", "poisson"])
@pytest.mark.parametrize("policy", ["ttlpolicy", "ttlpolicy-offload"])
def test_runs_kept_whole_while_the_eviction_order_holds_give_the_step_by_step_results(
    policy: str, load: str
) -> None:
    """Under a policy's eviction order, which reads the clock, a run of steps whose later
    steps evict is kept whole only while the policy says the order holds
    (``eviction_order_change_s``); when it cannot say (None) every such run ends before its first
    step that evicts, and each evicting step evicts in the order of its own start.  The same
    results either way (to the clock's last bits) — on a KV cache of 20 GB, where the three
    sessions' 120k-token contexts compete and the hook is asked both ways."""
    answers: list[bool] = []

    def run_with(hook: bool) -> dict[str, Any]:
        hw = roofline("llama-3.1-8b", "h100-80g", cpu_tier_bytes=64e9)
        engine = Engine(dataclasses.replace(hw, kv_capacity_bytes=20e9), make_policy(policy))
        asked = engine._order_change_s

        def counted(programs: list[str], from_s: float, until_s: float) -> float | None:
            at = asked(programs, from_s, until_s)
            assert at is not None
            answers.append(at > until_s)
            return at if hook else None  # (None: the order may change at any instant)

        engine._order_change_s = counted
        if load == "closed":
            engine.use_concurrency(ConcurrencyArrivals(PROGRAMS, 8, 0))
        else:
            engine.add_programs(poisson_arrivals(PROGRAMS, 0.05, 0))
        m = engine.run()
        assert m.calls_done == sum(len(p.turns) for p in PROGRAMS)
        assert m.evicted_blocks > 0
        return dataclasses.asdict(m)

    whole, step_by_step = run_with(True), run_with(False)
    assert True in answers and False in answers  # runs kept whole, and runs ended
    assert whole.keys() == step_by_step.keys()
    for field, value in whole.items():
        assert same_but_rounding(value, step_by_step[field]), field
