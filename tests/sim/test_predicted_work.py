"""bench/predicted_work.py, the remaining work predicted without foresight behind
``mori+psjf`` / ``mori+psrpt`` (bench/heavy_bound.py): a prediction reads no call beyond the
one queued (nor that call's output or tool), the fit never reads the validation fold and
predicts each training fold from the others, and the predicted order starts the program
predicted shorter first."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, roofline
from ttlpolicy.sim.call import Call, ProgramRun
from ttlpolicy.sim.hardware import Hardware

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import heavy_bound  # (bench/)
import predicted_work
from bounds import fold_of

B = 64
W = heavy_bound.DECODE_WEIGHT


def ids_in_fold(fold: int, n: int, stem: str) -> list[str]:
    """``n`` program ids (session ids, as the trace names them) of bench/bounds.py's fold."""
    names = (f"{stem}{i}" for i in itertools.count())
    return list(itertools.islice((x for x in names if fold_of(x, 4) == fold), n))


def program(pid: str, turns: int, prompt: int, output: int) -> Program:
    return Program(
        pid,
        tuple(
            Turn(
                prompt + 256 * i,
                output,
                (prompt + 256 * (i - 1)) // B if i else 0,
                2.0,
                "tool_use" if i < turns - 1 else None,
            )
            for i in range(turns)
        ),
    )


def training_set(long_turns: int = 12) -> list[Program]:
    """Each fold: main sessions that run ``long_turns`` calls, sub-agents that run 2."""
    out = []
    for f in range(4):
        out += [program(pid, long_turns, 4096, 400) for pid in ids_in_fold(f, 25, "main")]
        out += [program(f"{pid}/agent", 2, 4096, 50) for pid in ids_in_fold(f, 25, "sess")]
    return out


def call_of(prog: Program, k: int) -> Call:
    return Call(k, ProgramRun(prog, 0.0), k, 0.0)


turn_st = st.builds(
    Turn,
    st.integers(1, 8000),  # (around the training prompts' bucket edges)
    st.integers(1, 4000),
    st.integers(0, 10),
    st.floats(0.0, 300.0),
    st.sampled_from(["tool_use", "end_turn", None]),
)
PREDICTOR = predicted_work.fit_cross(training_set(), B, W)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(turn_st, min_size=1, max_size=12),
    st.data(),
    st.lists(turn_st, max_size=12),
    st.booleans(),
)
def test_a_prediction_never_reads_past_the_queued_call(turns, data, future, sub) -> None:
    pid = ids_in_fold(data.draw(st.integers(0, 3)), 1, "p")[0] + ("/agent" if sub else "")
    k = data.draw(st.integers(0, len(turns) - 1))
    real = Program(pid, tuple(turns))
    # the same program up to the queued call's prompt; its output, tool and later calls other
    now = turns[k]
    other_now = Turn(now.input_tokens, 50_000, now.reusable_blocks, now.think_s, "other")
    other = Program(pid, (*turns[:k], other_now, *future))
    a, b = call_of(real, k), call_of(other, k)
    assert PREDICTOR.remaining_work(a) == PREDICTOR.remaining_work(b)
    for order in heavy_bound.OrderedMori.PREDICTED:
        mori = heavy_bound.OrderedMori(order, W, PREDICTOR)
        assert mori._rank(a)[:3] == mori._rank(b)[:3]


def heavy_bound_hw() -> Hardware:
    return roofline("llama-3.1-8b", "h100-80g", cpu_tier_bytes=1e9)


def every_prediction(p: predicted_work.CrossFitPredictor) -> dict:
    seen = [predicted_work.Seen(sub, k, prompt) for sub in (False, True)
            for k in (0, 1, 3, 7, 30) for prompt in (1000, 4096, 5000, 90_000)]  # fmt: skip
    return {(f, s): p.tables[f].predict(s) for f in range(4) for s in seen}


def test_the_fit_reads_training_folds_only_each_predicted_from_the_others() -> None:
    base = training_set()
    before = every_prediction(predicted_work.fit_cross(base, B, W))
    # the validation fold's programs, changed beyond recognition: nothing moves
    changed = [program(p.program_id, 40, 50_000, 3000) if fold_of(p.program_id, 4) == 3 else p
               for p in base]  # fmt: skip
    assert every_prediction(predicted_work.fit_cross(changed, B, W)) == before
    # fold 0's changed: its own table does not move, the others' do (the change is seen)
    changed = [program(p.program_id, 40, 50_000, 3000) if fold_of(p.program_id, 4) == 0 else p
               for p in base]  # fmt: skip
    after = every_prediction(predicted_work.fit_cross(changed, B, W))
    assert {k: v for k, v in after.items() if k[0] == 0} == {
        k: v for k, v in before.items() if k[0] == 0
    }
    assert any(after[k] != before[k] for k in after if k[0] in (1, 3))


def test_the_fit_learns_which_programs_run_short() -> None:
    # sub-agents run 2 calls here, main sessions 12: the first call of a sub-agent is
    # predicted shorter, on every fold's table
    for table in PREDICTOR.tables.values():
        sub = table.predict(predicted_work.Seen(True, 0, 4096))
        main = table.predict(predicted_work.Seen(False, 0, 4096))
        assert sub < main / 3


def test_the_predicted_order_starts_the_program_predicted_shorter() -> None:
    """One call at a time: ``first`` holds the GPU while ``long`` (a main session, 6 calls)
    and then ``short`` (a sub-agent, 1 call) arrive: MORI and ttlpolicy-offload (without
    load control, which admits programs in arrival order) start ``long`` (it came first),
    their predicted orders ``short``."""
    hw = heavy_bound_hw()
    cfg = EngineConfig(block_tokens=B, token_budget=8192, max_seqs=1)
    first, long_id = ids_in_fold(3, 2, "run")
    short_id = ids_in_fold(3, 1, "sub")[0] + "/agent"

    def jcts(name: str) -> dict[str, float]:
        policy, run_hw = heavy_bound.make_run(name, hw, W, PREDICTOR)
        engine = Engine(run_hw, policy, cfg)
        engine.add_programs([(0.0, program(first, 1, 4096, 64)),
                             (0.1, program(long_id, 6, 4096, 256)),
                             (0.2, program(short_id, 1, 4096, 8))])  # fmt: skip
        m = engine.run()
        return {p: m.program_finish_s[p] - m.program_start_s[p] for p in m.program_finish_s}

    pairs = [("mori", "mori+psjf"), ("mori", "mori+psrpt"), ("mori", "mori+pgittins")]
    pairs.append(("ttlpolicy-offload:admission", "ttlpolicy-offload:admission+psjf"))
    for real, predicted in pairs:
        was, got = jcts(real), jcts(predicted)
        assert got[short_id] < was[short_id], predicted
        assert got[long_id] > was[long_id], predicted


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.5, 1e6), min_size=1, max_size=40))
def test_the_gittins_index_is_the_best_ratio_over_every_budget(works) -> None:
    mean, index = predicted_work.bucket(works)
    r = np.array(works)
    assert mean == pytest.approx(r.mean())
    # brute force: every budget q (the samples and between them), done share / work spent
    budgets = np.concatenate([r, (r[:, None] + r[None, :]).ravel() / 2])
    ratios = [(r <= q).mean() / np.minimum(r, q).mean() for q in budgets]
    assert index == pytest.approx(max(ratios), rel=1e-9)
    assert index >= 1.0 / mean * (1 - 1e-12)  # (the whole run as the budget)


def test_a_predicted_order_needs_its_predictor() -> None:
    with pytest.raises(ValueError, match="predictor"):
        heavy_bound.OrderedMori("psjf", W)
    with pytest.raises(ValueError, match="predictor"):
        heavy_bound.OrderedMori("srpt", W, PREDICTOR)
    with pytest.raises(ValueError, match="needs a predictor"):
        heavy_bound.make_run("ttlpolicy-offload+psjf", heavy_bound_hw(), W)
    with pytest.raises(ValueError, match="validation_fold"):
        predicted_work.fit_cross(training_set(), B, W, validation_fold=4)
