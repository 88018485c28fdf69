"""bench/onset_probe.py, the tool behind RESULTS' "The onset of contention on seed 2": its
``--variant`` rules must leave the shipped rule where they claim to (``threshold=1`` is the
shipped working set, ``order=program`` the shipped serving order), and must reach the
simulated policy when they change it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ttlpolicy

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "python" / "ttlpolicy" / "data" / "sessions"
# 16 sample sessions arriving fast enough on one H100 that admission holds programs back
ARGS = ["--trace", str(SAMPLE), "--rate", "0.05", "--seed", "1", "--policies", "ttlpolicy"]

#: runs the probe in one Python-reference process, shipped first, then each variant (a variant
#: replaces ``ttlpolicy.AdmissionControl`` or ``ttlpolicy.ProgramScheduler`` for the rest)
SCRIPT = """
import contextlib, io, sys
sys.path.insert(0, {bench!r})
import onset_probe
for variant in {variants!r}:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert onset_probe.main({args!r} + variant) == 0
    print("=== " + " ".join(variant))
    print(out.getvalue())
"""


def _runs(
    *variants: list[str], args: list[str] = ARGS, policy: str = "ttlpolicy"
) -> dict[str, str]:
    env = {**os.environ, "TTLPOLICY_BACKEND": "python"}
    script = SCRIPT.format(bench=str(REPO / "bench"), variants=[[], *variants], args=args)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    runs = {}
    for block in done.stdout.split("=== ")[1:]:
        variant, _, out = block.partition("\n")
        # the ttlpolicy lines, without the header that names the variant
        runs[variant.strip()] = out[out.index(f"{policy} ") :]
    return runs


def _without_order_line(run: str) -> str:
    # (an order= run adds one line: how often the order had a choice)
    assert "returning calls served" in run
    return "\n".join(line for line in run.split("\n") if "returning calls served" not in line)


def test_variants_are_the_shipped_rule_at_threshold_1_and_change_it_elsewhere() -> None:
    runs = _runs(["--variant", "threshold=1"], ["--variant", "threshold=1000"])
    shipped, same, wider = runs[""], runs["--variant threshold=1"], runs["--variant threshold=1000"]
    assert "JCT" in shipped
    assert same == shipped  # the same working set: every figure equal
    # every admitted program counted as expected back: admission holds newcomers longer
    assert wider.split("pins:")[0] != shipped.split("pins:")[0]
    assert "admission held the head" in wider


def test_orders_are_the_shipped_order_at_program_and_change_it_elsewhere() -> None:
    # four times the rate: returning calls of several programs wait at once, so order matters
    args = [*ARGS[:2], "--rate", "0.2", *ARGS[4:]]
    runs = _runs(["--variant", "order=program"], ["--variant", "order=request"], args=args)
    shipped, same, other = (
        runs[""],
        runs["--variant order=program"],
        runs["--variant order=request"],
    )
    assert "JCT" in shipped
    # returning calls by program arrival: program FCFS, every figure equal
    assert _without_order_line(same) == shipped
    # request FCFS among returning calls: another order, so other waits and other figures
    assert other.split("pins:")[0] != shipped.split("pins:")[0]


def test_a_variant_refuses_the_native_backend(capsys) -> None:
    if ttlpolicy.backend == "python":
        pytest.skip("the Python reference is what a variant needs")
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import onset_probe

        assert onset_probe.main([*ARGS, "--variant", "threshold=2"]) == 2
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert "TTLPOLICY_BACKEND=python" in capsys.readouterr().out


def test_with_a_tier_the_shipped_order_is_attained_service_as_the_probe_restates_it() -> None:
    """``ttlpolicy-offload`` serves returning calls by ``serve_order="attained"`` (the
    library's rule); the probe's ``order=attained`` restates the rule on its own tally of each
    program's service: the two runs must agree to every figure, and program FCFS must not."""
    args = [*ARGS[:2], "--rate", "0.2", *ARGS[4:6], "--policies", "ttlpolicy-offload"]
    runs = _runs(
        ["--variant", "order=attained"],
        ["--variant", "order=program"],
        args=args,
        policy="ttlpolicy-offload",
    )
    shipped = runs[""]
    assert "JCT" in shipped
    assert _without_order_line(runs["--variant order=attained"]) == shipped
    assert (
        _without_order_line(runs["--variant order=program"]).split("pins:")[0]
        != (shipped.split("pins:")[0])
    )
