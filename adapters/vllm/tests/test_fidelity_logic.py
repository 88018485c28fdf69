"""``bench/fidelity_logic.py`` on vLLM's real scheduler: deterministic, the block pool balances,
and where nothing is evicted the simulator serves every request exactly as vLLM does.

The harness runs as the command the RESULTS give (its own process: it imports its neighbours
in bench/ by name), on small workloads: a few seconds of virtual time, no model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
SMALL = ["--programs", "4", "--turns", "4", "--max-context", "3000", "--max-out", "120"]


def harness(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, str(BENCH / "fidelity_logic.py"), *SMALL, *args, "--json", str(out)]
    env = os.environ | {"PYTHONPATH": str(BENCH)}
    proc = subprocess.run(cmd, cwd=BENCH, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def contended(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Two runs of a workload whose programs compete for 500 KV blocks (they need ~750)."""
    tmp = tmp_path_factory.mktemp("fidelity-logic")
    return [harness(tmp, f"run{i}", "--blocks", "500") for i in range(2)]


def test_two_runs_give_identical_results(contended):
    first, second = (run["rows"] for run in contended)
    assert [r["scheduler"] for r in first] == ["Scheduler", "TTLScheduler"]
    assert first == second


def test_the_workload_competes_for_memory(contended):
    for row in contended[0]["rows"]:
        assert row["engine"]["evicted_blocks"] > 0, row["scheduler"]
        assert row["sim"]["hit_rate"] < 0.9


def test_every_block_is_free_at_the_end(contended):
    # vLLM's pool: every usable block back in the free queue (the null block is not in it),
    # none still referenced — pins included (TTLScheduler pins between turns).
    for row in contended[0]["rows"]:
        engine = row["engine"]
        assert engine["leaked_blocks"] == 0, row["scheduler"]
        assert engine["free_blocks_end"] == 500, row["scheduler"]
    assert contended[0]["rows"][1]["engine"]["pins"] > 0  # the pins were exercised


def test_without_evictions_the_simulator_serves_each_request_as_vllm(tmp_path):
    # Room for everything: what is left is the prefix-cache rules alone (which full blocks a
    # finished request leaves cached, how many tokens a return hits), and each request's
    # cached tokens must be vLLM's exactly, so must every timing.
    (row,) = harness(tmp_path, "roomy", "--blocks", "4000", "--stock-only")["rows"]
    assert row["requests"]["requests"] == 16
    assert row["requests"]["differ"] == 0, row["requests"]["first"]
    assert row["engine"]["hit_rate"] > 0.5
    for metric, error in row["error"].items():
        assert abs(error) < 1e-6, (metric, row["engine"][metric], row["sim"][metric])


def test_programs_in_flight_start_as_in_the_simulator(tmp_path):
    # ``--concurrency``: three programs at a time on a cache they compete for, each later one
    # started when one ends (18 programs: two sessions taken twice).  Stock vLLM and the
    # simulator must still agree request by request: both start the same program at the
    # same instant, and the first three at 0 in one order.
    args = ["--programs", "18", "--concurrency", "3", "--blocks", "500", "--stock-only"]
    (row,) = harness(tmp_path, "in-flight", *args)["rows"]
    assert row["requests"]["requests"] == 18 * 4
    assert row["engine"]["evicted_blocks"] > 0
    assert row["requests"]["differ"] == 0, row["requests"]["first"]
    for metric, error in row["error"].items():
        assert abs(error) < 1e-6, (metric, row["engine"][metric], row["sim"][metric])


def test_pins_only_the_simulator_prices_and_pins_as_ttlscheduler(tmp_path):
    # TTLScheduler prices a lost prefix with TTLPolicy.miss_cost_s, fitted to the prefill
    # steps it timed; ttlpolicy:adapter feeds the library the same samples.  With load
    # control off on both sides (pins only) and 8 programs competing for 1500 blocks, the two
    # then take the same pins and serve the same hits (one request may differ by a block:
    # the simulator allocates a prompt whole, vLLM chunk by chunk).  Priced by the
    # simulator's exact prefill time instead, it pinned 30 times to vLLM's 26 and 18 of 80
    # requests hit differently (+3.2 pt).
    workload = ["--programs", "8", "--turns", "10", "--max-context", "6000"]
    workload += ["--max-out", "200", "--blocks", "1500"]
    policy = ["--sim-policy", "ttlpolicy:adapter+admission+evict"]
    _, row = harness(tmp_path, "pins", *workload, *policy)["rows"]
    assert row["engine"]["pins"] > 10
    assert row["sim"]["pins"] == row["engine"]["pins"]
    assert row["requests"]["differ"] <= 2, row["requests"]["first"]
    assert abs(row["error"]["hit_rate"]) < 0.1
    for metric in ("ttft_mean_s", "jct_mean_s", "throughput_tok_s"):
        assert abs(row["error"][metric]) < 1e-3, (metric, row["error"][metric])


def test_a_calibrated_profile_prices_both_sides_per_sequence(tmp_path):
    """``--profile``: both sides run on a calibrated profile's step times, the per-sequence
    term included.  With a profile where a sequence in a step costs 10 ms, twice the step's
    own cost, and room for every program (nothing evicted), vLLM's stock scheduler and the
    simulator's ``vllm`` policy must still agree — which holds only if the engine side counts
    a step's sequences (``calibrate.scheduled_shape``) as the simulator's engine does."""
    from ttlpolicy.sim import load_profile, roofline, save_profile
    from ttlpolicy.sim.hardware import Line, StepModel

    base = roofline("llama-3.1-8b", "h100-80g")
    line = Line(0.005, 1e-5, 0.0, 0.0, 0.01)
    path = tmp_path / "per-seq.json"
    save_profile(path, type(base)(base.model, base.gpu, StepModel(line, line), 1e12))
    assert load_profile(path).steps.compute.c_seq == 0.01
    run = harness(tmp_path, "per-seq", "--blocks", "6000", "--stock-only", "--profile", str(path))
    (row,) = run["rows"]
    for metric, error in row["error"].items():
        assert abs(error) < 1e-6, (metric, row["engine"][metric], row["sim"][metric])


@pytest.mark.parametrize(
    "workload",
    [
        # the harness's default: 131 pins; 33 of 160 requests differed while the simulator
        # released a pin only after the running calls took their step's blocks
        ["--programs", "16", "--turns", "10"],
        # a return with no tool time waits behind another call: 1 of 40 differed while the
        # simulator freed a handed-over pin's chain at its call's arrival
        ["--programs", "10", "--turns", "4", "--blocks", "1800"],
        # an A100's longer steps: 32 of 160 differed while the simulator expired the pins
        # due within a step before taking the calls that came back in it
        ["--programs", "16", "--turns", "10", "--gpu", "a100-80g", "--blocks", "2500"],
    ],
    ids=["reclaimed-ahead", "held-until-admitted", "expired-after-arrivals"],
)
def test_with_load_control_the_simulator_pins_and_serves_as_ttlscheduler(tmp_path, workload):
    # ``ttlpolicy:adapter`` as deployed (load control on, the roofline's step times): the
    # simulator must take TTLScheduler's pins and serve each request's hit exactly.
    run = harness(tmp_path, "ttl", "--max-context", "6000", "--max-out", "200", *workload)
    _, row = run["rows"]
    assert row["engine"]["pins"] > 10
    assert row["sim"]["pins"] == row["engine"]["pins"]
    assert row["requests"]["differ"] == 0, row["requests"]["first"]
    for metric, error in row["error"].items():
        assert abs(error) < 1e-6, (metric, row["engine"][metric], row["sim"][metric])
