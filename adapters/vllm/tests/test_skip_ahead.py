"""Past a head of the queue too large for memory (``ttlpolicy.serving.skip_ahead``), on vLLM's
real scheduler (``test_load_control_bounds``' rig: no model, a virtual clock, 24 blocks).

``a`` runs and holds 14-16 blocks; ``b`` (12 blocks) heads the queue and does not fit beside
it: vLLM's scan stops at it (``allocate_slots`` fails, ``scheduler_reserve_full_isl``).  With
the skip (``TTLPOLICY_SKIP_DEPTH``; by default on only with a reload tier, which this rig has
not) ``c`` (2 blocks), behind ``b``, starts at once; without it ``c`` waits for ``b``, which
waits for ``a``.  Load control is off: it would hold ``b`` back as a new program."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_load_control_bounds import BLOCK, Rig, quiet

__all__ = ["quiet"]  # fixture

MAX_STEPS = 400  # (a stalled scenario fails rather than hangs)


def run(bench: Any, model: Path, monkeypatch: pytest.MonkeyPatch, depth: str | None) -> Rig:
    monkeypatch.setenv("TTLPOLICY_POLICY", '{"admission": false}')
    if depth is None:
        monkeypatch.delenv("TTLPOLICY_SKIP_DEPTH", raising=False)
    else:
        monkeypatch.setenv("TTLPOLICY_SKIP_DEPTH", depth)
    rig = Rig(bench, model)
    rig.send("a", 14 * BLOCK - 16, 60, "a")
    rig.step()
    assert "a" in rig.started
    rig.send("b", 12 * BLOCK - 16, 4, "b")
    rig.send("c", 2 * BLOCK - 16, 4, "c")
    for _ in range(MAX_STEPS):
        if rig.done("b") and rig.done("c"):
            break
        rig.step()
    assert rig.done("a") and rig.done("b") and rig.done("c")
    return rig


@pytest.mark.slow
def test_a_request_that_fits_passes_a_head_that_does_not(
    bench: Any, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = run(bench, tiny_model, monkeypatch, "8")
    assert rig.started["c"] < rig.started["b"], rig.started  # c ran beside a
    assert rig.started["c"] == rig.started["a"] + 0.1  # at the step after it was sent
    assert rig.sched.programs.waiting_count == 0 and len(rig.sched.waiting) == 0
    assert rig.sched.ttl_stats()["queue_skips"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("depth", ["0", None])  # off, and the default without a reload tier
def test_without_the_skip_the_scan_stops_at_the_head(
    bench: Any, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, depth: str | None
) -> None:
    rig = run(bench, tiny_model, monkeypatch, depth)
    assert rig.started["c"] >= rig.started["b"], rig.started  # vLLM's order
    assert rig.sched.ttl_stats()["queue_skips"] == 0
