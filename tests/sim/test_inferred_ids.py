"""Program ids the simulated ttlpolicy sees (issue 45, the simulator's side): the trace's
(``explicit``, the default), none (each call its own program), or linked by
``ttlpolicy.ProgramLinker`` from the calls' block hashes (``inferred``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from trace_files import DATA
from ttlpolicy.cli import main as cli_main
from ttlpolicy.ids import is_inferred
from ttlpolicy.sim import Engine, programs_from_records, roofline
from ttlpolicy.sim.call import Call, ProgramRun
from ttlpolicy.sim.metrics import Metrics
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.program_ids import ProgramIds
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin, with_ids
from ttlpolicy.sim.workload import ConcurrencyArrivals
from ttlpolicy.traces import read_trace

PROGRAMS = programs_from_records(
    read_trace(DATA / "sessions"), max_context=120_000, context_mode="truncate", think_cap_s=300.0
)


def run(policy: str) -> tuple[TTLPolicyPlugin, Metrics]:
    # two programs in flight on a small KV memory: pins matter, the queue forms
    hw = roofline("llama-3.1-8b", "h100-80g")
    plugin = make_policy(policy)
    assert isinstance(plugin, TTLPolicyPlugin)
    engine = Engine(hw, plugin)
    engine.use_concurrency(ConcurrencyArrivals(PROGRAMS, 2, 0))
    return plugin, engine.run()


def test_no_ids_gives_no_pins() -> None:
    _, explicit = run("ttlpolicy")
    plugin, none = run("ttlpolicy:no-ids")
    assert plugin.ids == "none"
    assert explicit.pinned_block_s > 0  # (the same run with the trace's ids pins)
    assert none.pinned_block_s == 0
    assert none.calls_done == explicit.calls_done == sum(len(p.turns) for p in PROGRAMS)


def test_inferred_links_almost_every_call_to_its_program(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []  # (the trace's program, the linked one), per call
    arrive = ProgramIds.arrive

    def recording(self: ProgramIds, call: Call, now: float) -> str:
        pid = arrive(self, call, now)
        seen.append((call.program_id, pid))
        return pid

    monkeypatch.setattr(ProgramIds, "arrive", recording)
    plugin, m = run("ttlpolicy:inferred-ids")
    assert plugin._ids is not None and plugin._ids.links.total() == len(seen)
    assert len(seen) == sum(len(p.turns) for p in PROGRAMS)
    # named as an engine names the programs it inferred: load control judges them so
    assert all(is_inferred(pid) for _, pid in seen)
    # precision: a linked program holds one trace program's calls
    owner: dict[str, str] = {}
    for true, pid in seen:
        assert owner.setdefault(pid, true) == true
    # recall: a call that keeps >= 90 % of its previous call's prompt (as an agent's next call
    # does; less is a compaction, a new context) is in its previous call's linked program
    calls = {p.program_id: p.turns for p in PROGRAMS}
    turn: Counter[str] = Counter()
    previous: dict[str, str] = {}
    kept = same = 0
    for true, pid in seen:
        i = turn[true]
        turn[true] += 1
        if i:
            prev_blocks = calls[true][i - 1].input_tokens // 64
            if calls[true][i].reusable_blocks >= 0.9 * prev_blocks > 0:
                kept += 1
                same += pid == previous[true]
        previous[true] = pid
    assert kept >= 0.9 * (len(seen) - len(PROGRAMS))  # (the test has teeth: most calls)
    assert same >= 0.95 * kept
    assert m.pinned_block_s > 0  # linked programs are pinned, as the trace's are


def test_hashes_rebuild_each_turns_shared_prefix() -> None:
    """A call's hashes share exactly its turn's reusable blocks with its previous call's."""
    ids = ProgramIds("inferred", 64)
    prog = PROGRAMS[0]
    run_ = ProgramRun(prog, 0.0)
    prev: list[int] = []
    for i, turn in enumerate(prog.turns):
        hashes = ids.hashes(Call(i, run_, i, 0.0))
        assert len(hashes) == turn.input_tokens // 64
        shared = 0
        while shared < min(len(prev), len(hashes)) and prev[shared] == hashes[shared]:
            shared += 1
        assert shared == (min(turn.reusable_blocks, len(prev), len(hashes)) if i else 0)
        prev = hashes


def test_with_ids_names() -> None:
    assert with_ids("ttlpolicy", "explicit") == "ttlpolicy"
    assert with_ids("vllm", "inferred") == "vllm"
    assert with_ids("ttlpolicy", "inferred") == "ttlpolicy:inferred-ids"
    assert with_ids("ttlpolicy-offload:pins/x=1", "none") == "ttlpolicy-offload:pins+no-ids/x=1"
    with pytest.raises(ValueError, match="ids"):
        with_ids("ttlpolicy", "guessed")
    with pytest.raises(ValueError, match="two ids"):
        make_policy("ttlpolicy:no-ids+inferred-ids")


def test_default_ids_are_the_explicit_path(tmp_path: Path) -> None:
    """``compare`` without ``--ids`` writes, byte for byte, what ``--ids explicit`` writes;
    ``--ids none`` renames ttlpolicy's row (what it ran) and leaves vLLM's as it was."""
    out = {}
    for name, extra in (
        ("default", []),
        ("explicit", ["--ids", "explicit"]),
        ("none", ["--ids", "none"]),
    ):
        path = tmp_path / f"{name}.json"
        argv = ["compare", "--policies", "vllm,ttlpolicy", "--concurrency", "2"]
        assert cli_main([*argv, "--json", str(path), *extra]) == 0
        out[name] = path.read_bytes()
    assert out["default"] == out["explicit"]
    default = {r["policy"]: r["summary"] for r in json.loads(out["default"])["results"]}
    none = {r["policy"]: r["summary"] for r in json.loads(out["none"])["results"]}
    assert set(none) == {"vllm", "ttlpolicy:no-ids"}
    assert none["vllm"] == default["vllm"]
