"""The engine's loop shortcuts change no result: whole simulations on the shipped sessions give
the same metrics, to the last bit, as the plain computations the shortcuts stand for.

The shortcuts (``bench/RESULTS.md``, "Tier planner", speed): a single step is timed by
``StepModel.step_s`` instead of a ``StepRun`` (``Engine.one_step_shortcut``);
``EngineView.prefill_s`` adds a prefill's whole chunks, memoised by their count, to its last
chunk.  The plain path here times every step through a ``StepRun`` and asks the hardware's
chunk loop for every prefill.
"""

from __future__ import annotations

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
