"""``bench/fidelity_causes.py``: the engine's prefill samples rebuilt from its recorded steps,
and step scatter drawn from the engine's steps near the simulator's instant (no engine)."""

from __future__ import annotations

import pytest


@pytest.fixture
def causes(bench):
    return bench("fidelity_causes")


def test_first_chunks_are_the_chunks_that_continue_nothing(causes) -> None:
    # a 1193-token call in chunks of 512, a second call starting beside its last chunk,
    # then both decoding / continuing (steps as StepRecorder writes them)
    steps = [
        [(512, 0)],
        [(512, 512)],
        [(169, 1024), (343, 0)],
        [(1, 1193), (511, 343)],
        [(1, 1194), (103, 854), (408, 32)],  # a third call with one cached block
    ]
    assert causes.first_chunks(steps) == [[(512, 0)], [], [(343, 0)], [], [(408, 32)]]


def test_drifting_steps_draw_from_the_engine_steps_near_the_instant(causes) -> None:
    from ttlpolicy.sim.hardware import Line, StepModel

    line = Line(0.01, 1e-4, 0.0, 0.0, 0.0)
    base = StepModel(line, line, line)
    # prefill steps: ratio 0.5 in the run's first 10 s, 2.0 after; decode steps: 1.5 all along
    timed = sorted(
        [(float(t), 0.5 if t < 10 else 2.0, False) for t in range(20)]
        + [(float(t), 1.5, True) for t in range(20)]
    )
    now = [3.0]
    steps = causes.DriftingSteps(base, timed, 0, 3.0, lambda: now[0])
    prefill = base.step_s(100, 0, 0, 1)
    assert all(steps.step_s(100, 0, 0, 1) / prefill == pytest.approx(0.5) for _ in range(50))
    now[0] = 16.0
    assert all(steps.step_s(100, 0, 0, 1) / prefill == pytest.approx(2.0) for _ in range(50))
    decode = base.step_s(4, 0, 0, 4)
    assert steps.step_s(4, 0, 0, 4) / decode == pytest.approx(1.5)
    # a window holding fewer than MIN_POOL steps is widened, not left empty
    narrow = causes.DriftingSteps(base, timed, 0, 0.01, lambda: 100.0)
    assert narrow.step_s(100, 0, 0, 1) / prefill == pytest.approx(2.0)


def test_model_steps_match_the_recorded_rows_past_the_empty_steps(causes) -> None:
    # rows (tokens, attn, kv, seqs, seconds); the timeline wraps each row's step a little
    # longer, and times empty steps between them, one of them a slow 4 ms
    rows = [[512, 0, 512, 1, 0.100], [1, 0, 513, 1, 0.008], [1, 0, 514, 1, 0.009]]
    timeline = [[0.0, 0.1001], [0.1001, 0.1006], [0.1006, 0.1086], [0.1086, 0.1126],
                [0.1126, 0.1217]]  # fmt: skip
    data = {"steps": {causes.SCHEDULER: {"rows": rows, "timeline": {"steps": timeline}}}}
    assert causes.model_steps(data) == [(0.0, 0.1001), (0.1006, 0.1086), (0.1126, 0.1217)]
    rows.append([1, 0, 515, 1, 0.020])  # a row with no timed step of its own
    with pytest.raises(ValueError, match="no threshold leaves 4 timed steps"):
        causes.model_steps(data)
