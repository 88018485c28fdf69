"""The report of a ``TTLScheduler`` in vLLM's engine-core *subprocess* reaching the process
that started the engine: the real OpenAI-compatible server (its default layout: the
scheduler in an engine-core child of the API server, the process a Serve replica would be),
``ReportingTTLScheduler`` writing ``report_path(TTLPOLICY_REPORT_DIR, <API server pid>)``,
this test reading it as a replica would (``read_report``) and handing it to the library's
router.

Not run in the Ray venv (no vLLM there): ``scripts/test.sh`` runs it in the vLLM venv beside
``test_vllm_report.py``; by hand, from ``adapters/vllm``::

    PYTHONPATH=$PWD/../ray/src:$PWD/tests ~/.cache/ttlpolicy/venv-vllm-<key>/bin/python \\
        -m pytest -c pyproject.toml ../ray/tests/test_vllm_report_file.py

The expected figures come from the workload (one program's turn ending on a tool, pinned)
and vLLM's own block counts, not from the code under test.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

vllm_engine = pytest.importorskip("vllm_engine")  # bench/: sets vLLM's environment first
pytest.importorskip("vllm")
pytest.importorskip("ttlpolicy_vllm")
server = pytest.importorskip("server")  # adapters/vllm/tests: the real server, started
from ttlpolicy_ray import REPORT_DIR_ENV, REPORT_KEY, read_report, report_path  # noqa: E402

import ttlpolicy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 25  # one is vLLM's null block
BLOCK = vllm_engine.BLOCK


def wait_for(path: Path, ok: Any, timeout_s: float = 60.0) -> dict[str, Any]:
    """The first report in ``path`` that ``ok`` accepts (fails after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = read_report(path)
        if last and ok(last[REPORT_KEY]):
            return last[REPORT_KEY]
        time.sleep(0.05)
    pytest.fail(f"no report as expected in {path} within {timeout_s} s; last: {last}")


def test_the_engine_process_report_reaches_the_replica_and_routes(tmp_path: Path) -> None:
    model = vllm_engine.build_tiny_model(tmp_path / "tiny-llama")
    reports = tmp_path / "reports"
    reports.mkdir()
    env = {
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        REPORT_DIR_ENV: str(reports),
        "TTLPOLICY_REPORT_PERIOD_S": "0",
    }
    cls = "ttlpolicy_ray.vllm_scheduler.ReportingTTLScheduler"  # (the later flag wins)
    with server.serve(model, tmp_path, NUM_BLOCKS, env, "--scheduler-cls", cls) as (base, proc, _):
        path = report_path(reports, proc.pid)  # the API server: the engine core's parent
        # before any call: a report of the empty engine (a router routes only to replicas
        # that have reported)
        empty = read_report(path).get(REPORT_KEY)
        assert empty is not None, "no report before the first call"
        assert empty["free_blocks"] == empty["total_blocks"] == NUM_BLOCKS - 1
        assert empty["pins"] == [] and empty["queue_len"] == 0
        rng = random.Random(3)
        prompt = [rng.randrange(3, 250) for _ in range(201)]
        out = server.complete(base, prompt, 24, program_id="prog", tool="bash")
        context_blocks = (len(prompt) + len(out["choices"][0]["token_ids"]) - 1) // BLOCK
        first = wait_for(path, lambda r: any(p[0] == "prog" for p in r["pins"]))
        # idle, the engine writes nothing more; another program's call makes new reports
        server.complete(base, [rng.randrange(3, 250) for _ in range(60)], 2)
        later = wait_for(path, lambda r: r["seq"] > first["seq"] and not r["queue_len"])
    assert sorted(p.name for p in reports.iterdir()) == [path.name], "one file, no temporary"
    # the pin the turn left: the program, its context's full blocks, a deadline ahead
    (pin,) = [p for p in first["pins"] if p[0] == "prog"]
    assert pin[2] == context_blocks and 0.0 < pin[1] <= 300.0
    assert first["total_blocks"] == NUM_BLOCKS - 1 and first["block_size"] == BLOCK
    assert first["queue_len"] == 0 and first["queued_tokens"] == 0  # nothing else was sent
    assert first["free_blocks"] <= NUM_BLOCKS - 1 - context_blocks  # the pin holds its blocks
    assert [p for p in later["pins"] if p[0] == "prog"], later  # still pinned, still reported
    # a router fed the report keeps the program where its pin is, against an idle instance
    policy = ttlpolicy.TTLPolicy()
    router = ttlpolicy.ProgramRouter(policy)
    for iid in ("engine", "idle"):
        router.add_instance(iid)
    router.report("idle", NUM_BLOCKS - 1, NUM_BLOCKS - 1, 0, 0, 0, 1.0)
    figures = ("free_blocks", "total_blocks", "queue_len", "queued_tokens",
               "working_set_blocks", "cached_fraction")  # fmt: skip
    router.report("engine", *(first[f] for f in figures))
    assert router.pinned("engine", "prog", 1.0 + pin[1], pin[2])
    need = context_blocks + 2
    assert router.route("prog", 1.0, need, context_blocks * BLOCK) == "engine"
