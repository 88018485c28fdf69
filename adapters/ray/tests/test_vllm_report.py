"""``vllm_scheduler_stats`` and ``VllmEvictions`` against a real ``ttlpolicy_vllm.TTLScheduler``
(vLLM on CPU, the tiny random-weight model of ``bench/vllm_engine.py``, in this process).

Not run in the Ray venv (no vLLM there): ``scripts/test.sh`` runs it in the vLLM venv, under
the vLLM adapter's pytest options, after the vLLM adapter's tests; by hand, from
``adapters/vllm``::

    PYTHONPATH=$PWD/../ray/src ~/.cache/ttlpolicy/venv-vllm-<key>/bin/python \\
        -m pytest -c pyproject.toml ../ray/tests/test_vllm_report.py

24 usable KV blocks of 32 tokens, no pins (budget 0): load control and vLLM's prefix cache
alone.  The expected figures come from what the test submitted and from vLLM's own prefix
hits, not from the code under test.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vllm_engine = pytest.importorskip("vllm_engine")  # bench/: sets vLLM's environment first
pytest.importorskip("vllm")
pytest.importorskip("ttlpolicy_vllm")
from ttlpolicy_ray import REPORT_KEY, VllmEvictions, vllm_scheduler_stats  # noqa: E402

BLOCK = vllm_engine.BLOCK
NUM_BLOCKS = 25  # 24 usable: vLLM keeps block 0 as its null block
VOCAB = 256


def prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    model = vllm_engine.build_tiny_model(Path(tmp_path_factory.mktemp("tiny-llama")))
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", vllm_engine.TEST_POLICY)  # load control on (the default)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0")
    eng = vllm_engine.make_engine(model, "ttlpolicy_vllm.TTLScheduler", NUM_BLOCKS)
    mp.undo()
    yield eng
    eng.llm.llm_engine.engine_core.shutdown()


def report(engine: Any, evictions: VllmEvictions | None = None) -> dict[str, Any]:
    return vllm_scheduler_stats(engine.scheduler, seq=1, evictions=evictions)[REPORT_KEY]


def test_return_queue_is_the_admitted_programs_waiting_calls(engine: Any) -> None:
    sched = engine.scheduler
    # a's first turn (13 blocks) ends calling a tool: a is admitted and expected back
    p_a = prompt(1, 400)
    out = engine.turn(p_a, 8, program_id="a", tool="bash")
    ctx_a = p_a + list(out.outputs[0].token_ids)
    assert sched.admission.admitted("a")
    engine.clock.advance(0.5)
    # b (13 blocks) arrives while a is away: load control holds it back; then a returns
    p_b = prompt(2, 400)
    b = engine.submit(p_b, 8, program_id="b", last_turn=True)
    a2 = engine.submit(ctx_a + prompt(3, 20), 4, program_id="a", last_turn=True)
    rep = report(engine)
    assert (rep["queue_len"], rep["queued_tokens"]) == (2, len(p_b) + len(ctx_a) + 20)
    assert (rep["return_queue_len"], rep["return_queued_tokens"]) == (1, len(ctx_a) + 20)
    engine.run()
    assert {a2, b} <= set(engine.outputs)
    assert sched.admission.program_count == 0


def test_evicted_context_is_listed_with_what_a_next_call_finds(engine: Any) -> None:
    sched = engine.scheduler
    evictions = VllmEvictions()
    # x's turn ends without a tool (not expected back: its blocks go first), y's calling
    # one; 6 full blocks cached each
    p_x = prompt(11, 200)
    engine.submit(p_x, 8, program_id="x")
    assert report(engine, evictions)["evicted"] == []  # x seen live: watched
    engine.run()
    ctx_x = p_x + list(engine.outputs[max(engine.outputs)].outputs[0].token_ids)
    assert report(engine, evictions)["evicted"] == []  # all of it cached
    engine.clock.advance(0.1)
    engine.turn(prompt(12, 200), 8, program_id="y", tool="bash")
    engine.clock.advance(0.1)
    # an anonymous 15-block call takes the 12 empty blocks and 3 cached ones: x's
    engine.turn(prompt(13, 14 * BLOCK), 8)
    rep = report(engine, evictions)
    assert [pid for pid, _ in rep["evicted"]] == ["x"]  # (y was never seen live: not watched)
    ((_, held),) = rep["evicted"]
    assert held < 200 // BLOCK
    assert report(engine, evictions)["evicted"] == [["x", held]]  # a state, until x is back
    # what x's next call finds cached is what was reported held
    x2 = engine.submit(ctx_x + prompt(14, 8), 2, program_id="x", last_turn=True)
    assert report(engine, evictions)["evicted"] == []  # x is live: its call rebuilds it
    engine.run()
    assert engine.outputs[x2].num_cached_tokens == held * BLOCK
    engine.turn(prompt(15, 8), 2, program_id="y", last_turn=True)
    assert report(engine, evictions)["evicted"] == [] and len(evictions) == 0  # both ended
    assert sched.admission.program_count == 0


@pytest.fixture(scope="module")
def tenant_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An engine whose tenants come from a gateway's field and whose anonymous calls are
    linked to programs: the report must name programs as this scheduler does."""
    model = vllm_engine.build_tiny_model(Path(tmp_path_factory.mktemp("tiny-llama-tenants")))
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", vllm_engine.TEST_POLICY)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0")
    mp.setenv("TTLPOLICY_TENANT_FIELD", "tenant")
    mp.setenv("TTLPOLICY_INFER_PROGRAMS", "1")
    eng = vllm_engine.make_engine(model, "ttlpolicy_vllm.TTLScheduler", NUM_BLOCKS)
    mp.undo()
    yield eng
    eng.llm.llm_engine.engine_core.shutdown()


def test_programs_are_named_as_the_scheduler_names_them(tenant_engine: Any) -> None:
    from ttlpolicy.ids import program_key, tenant_key

    engine, evictions = tenant_engine, VllmEvictions()
    x_of_acme = program_key(tenant_key("acme"), "x")  # (the gateway's field, not the salt)
    # acme's x (6 full blocks) ends its turn without a tool (not expected back: its blocks go
    # first); a stranger (tenant "evil") puts acme's name in its cache salt and names x too,
    # a call of 6 full blocks of its own that ends calling a tool
    engine.submit(prompt(21, 200), 8, program_id="x", tenant="acme")
    engine.submit(prompt(22, 200), 8, cache_salt="acme", program_id="x", tenant="evil", tool="bash")
    watched = report(tenant_engine, evictions)
    assert watched["evicted"] == [] and len(evictions) == 2  # both watched, apart
    engine.run()
    engine.clock.advance(0.1)
    # an anonymous 15-block call of a third tenant takes the 12 empty blocks and 3 cached
    # ones: acme's x's (the older chain)
    engine.turn(prompt(23, 14 * BLOCK), 8, tenant="other")
    evicted = [pid for pid, _ in report(tenant_engine, evictions)["evicted"]]
    assert evicted == [x_of_acme]  # listed under acme's key (was: never, keyed by the salt)
