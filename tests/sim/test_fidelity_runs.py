"""bench/fidelity_runs.py, the summary behind RESULTS' fidelity figures over several engine
runs: the error's mean, standard error and spread, runs within the target, and the ranking
of the schedulers' means — checked on two hand-made runs whose figures are worked out here."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import fidelity_runs  # noqa: E402


def _metrics(ttft: float, hit: float, preemptions: float) -> dict[str, float]:
    return {"ttft_mean_s": ttft, "ttft_p90_s": 2 * ttft, "throughput_tok_s": 10.0,
            "hit_rate": hit, "jct_mean_s": 30.0, "preemptions": preemptions}  # fmt: skip


def _run(stock: tuple[tuple[float, ...], ...], ttl: tuple[tuple[float, ...], ...]) -> dict:
    rows = [
        {"scheduler": name, "engine": _metrics(*eng), "sim": _metrics(*sim)}
        for name, (eng, sim) in (("Scheduler", stock), ("TTLScheduler", ttl))
    ]
    return {"profiles": {"own": {"rows": rows}}}


# (ttft s, hit rate, preemptions): engine, then simulator
RUN_A = _run(((1.0, 0.25, 2.0), (1.05, 0.27, 0.5)), ((1.0, 0.5, 0.0), (0.8, 0.495, 1.0)))
RUN_B = _run(((1.0, 0.25, 0.0), (0.95, 0.245, 1.0)), ((1.0, 0.5, 1.0), (1.0, 0.53, 0.25)))


def test_errors_over_runs_are_worked_out_by_hand() -> None:
    s = fidelity_runs.summarize([RUN_A, RUN_B])
    stock_hit = s["schedulers"]["Scheduler"]["hit_rate"]
    # errors +2.0 and -0.5 points: mean 0.75, sd |2.0 - -0.5| / sqrt 2, s.e. sd / sqrt 2 = 1.25
    assert stock_hit["error_mean"] == pytest.approx(0.75)
    assert stock_hit["error_sd"] == pytest.approx(2.5 / math.sqrt(2))
    assert stock_hit["error_se"] == pytest.approx(1.25)
    assert stock_hit["runs_within"] == 1  # only -0.5 is within 1 point
    # the runs' means: engine 25 %, simulator 25.75 %
    assert stock_hit["error_of_means"] == pytest.approx(0.75)
    ttl_ttft = s["schedulers"]["TTLScheduler"]["ttft_mean_s"]
    assert ttl_ttft["error_mean"] == pytest.approx(-0.10)  # -20 % and 0 %
    assert ttl_ttft["runs_within"] == 1  # -20 % is outside 10 %
    assert s["schedulers"]["Scheduler"]["ttft_p90_s"]["runs_within"] is None  # no target


def test_the_means_can_rank_alike_where_no_single_run_does() -> None:
    s = fidelity_runs.summarize([RUN_A, RUN_B])
    pre = s["ranking"]["preemptions"]
    # run A: engine stock 2 > TTL 0, simulator 0.5 < 1.0; run B: 0 < 1, 1.0 > 0.25
    assert pre["runs_same"] == 0
    # means: engine stock 1.0 > TTL 0.5, simulator 0.75 > 0.625
    assert pre["means_same"] is True
    # hit rate: TTL above stock on both sides in both runs
    assert s["ranking"]["hit_rate"] == {"runs_same": 2, "means_same": True}


def test_the_means_rank_differently_when_the_simulator_flips_them() -> None:
    flipped = _run(((1.0, 0.25, 0.0), (1.0, 0.6, 0.0)), ((1.0, 0.5, 0.0), (1.0, 0.5, 0.0)))
    s = fidelity_runs.summarize([flipped])
    assert s["ranking"]["hit_rate"] == {"runs_same": 0, "means_same": False}
    assert "hit_rate 0 of 1 runs, means DIFFER" in fidelity_runs.report(s)


def test_bad_input_names_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "r.json"
    f.write_text(json.dumps(RUN_A))
    assert fidelity_runs.main([str(f), "--profile", "replay"]) == 2
    assert "profile 'replay' not in this run (has ['own'])" in capsys.readouterr().err
    other = _run(((1.0, 0.25, 0.0),) * 2, ((1.0, 0.5, 0.0),) * 2)
    other["profiles"]["own"]["rows"][1]["scheduler"] = "Other"
    with pytest.raises(ValueError, match="same two schedulers"):
        fidelity_runs.summarize([RUN_A, other])
    with pytest.raises(ValueError, match="no runs"):
        fidelity_runs.summarize([])


def test_the_report_prints_every_scheduler_and_metric() -> None:
    out = fidelity_runs.report(fidelity_runs.summarize([RUN_A, RUN_B]), markdown=True)
    for name in ("Scheduler", "TTLScheduler"):
        for m in fidelity_runs.METRICS:
            assert f"| {name} | {m} |" in out
