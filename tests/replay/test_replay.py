"""`ttlpolicy replay` against a fake OpenAI-compatible server on loopback (fake_server.py):
prefixes shared as the hashes say, gaps waited, ids sent or not, errors counted, Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_server import BLOCK, MODEL, Behaviour, serve

from trace_files import DATA
from ttlpolicy.cli import main
from ttlpolicy.replay import Call, Client, Options, Replay, ReplayProgram, load_programs, summary
from ttlpolicy.replay.programs import Workload

#: Every run of these tests ends within this many seconds (the server answers at once).
RUN_LIMIT_S = 60.0


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _workload(programs: list[ReplayProgram]) -> Workload:
    return Workload(programs, [], open_loop=True)  # played with run_timed: no sim order needed


def _opts(**kw) -> Options:
    kw.setdefault("model", MODEL)
    kw.setdefault("duration_s", RUN_LIMIT_S)
    return Options(**kw)


def _program(
    pid: str, calls: list[tuple[tuple[int, ...], int, float, str | None]]
) -> ReplayProgram:
    """calls: (hash ids, input tokens, gap s, tool)."""
    return ReplayProgram(
        pid, tuple(Call(n, 4, gap, tool, h) for h, n, gap, tool in calls), block_tokens=BLOCK
    )


HAND_MADE = [
    _program(
        "a", [((1, 2, 3), 3 * BLOCK + 5, 0.0, "bash"), ((1, 2, 3, 4, 5), 5 * BLOCK, 0.0, None)]
    ),
    _program("b", [((1, 2, 9), 3 * BLOCK, 0.0, "edit")]),
]


def test_prompts_share_exactly_the_prefixes_the_hashes_say() -> None:
    with serve() as fake:
        r = Replay(Client(fake.url), _opts())
        # b after a (one at a time: the server's cache sees a's blocks first)
        res = r.run_timed([(0.0, HAND_MADE[0]), (0.5, HAND_MADE[1])])
    assert res.stopped is None and not res.errors
    a1, a2, b1 = (x.words for x in fake.received)
    assert [len(a1), len(a2), len(b1)] == [3 * BLOCK + 5, 5 * BLOCK, 3 * BLOCK]
    assert _common(a1, a2) == 3 * BLOCK  # blocks 1,2,3 shared; a1's 5 tail words are its own
    assert _common(a1, b1) == 2 * BLOCK  # 1,2 shared, then 3 vs 9
    # the server's cache (blocks of BLOCK words) agrees, and the replay reports what it said
    assert [x.cached_tokens for x in fake.received] == [0, 3 * BLOCK, 2 * BLOCK]
    reported = [c.cached_tokens for p in res.programs for c in p.calls]
    assert reported == [0, 3 * BLOCK, 2 * BLOCK]
    s = summary(res)
    assert s["hit_rate"] == pytest.approx(5 * BLOCK / (len(a1) + len(a2) + len(b1)))
    assert s["ideal_hit_rate"] == pytest.approx(s["hit_rate"])  # an unbounded cache: all of it


def test_trace_prefixes_reach_the_server_as_the_simulator_reuses_them() -> None:
    """The shipped excerpt's session (with sub-agents): each call shares with its program's
    previous call the blocks the simulator's program says it may reuse."""
    w = load_programs(DATA / "sessions", max_programs=1, max_context=4096, think_cap_s=0.0)
    assert len(w.programs) > 1  # the session and its sub-agents
    with serve() as fake:
        r = Replay(Client(fake.url), _opts())
        res = r.run_closed(w.closed(seed=0), n=1)
    assert res.stopped is None and not res.errors
    sent: dict[str, list[list[str]]] = {}
    for x in fake.received:
        sent.setdefault(x.body["vllm_xargs"]["program_id"], []).append(x.words)
    sims = {p.program_id: p for p in w.sim_programs}
    checked = extra = 0
    for pid, prompts in sent.items():
        turns = sims[pid].turns
        assert [len(p) for p in prompts] == [t.input_tokens for t in turns]
        bt = w.programs[0].block_tokens
        for prev, cur, t in zip(prompts, prompts[1:], turns[1:], strict=False):
            # the reused blocks, and then a word or two more when random words coincide
            # (1/256 a word: replay.prompts) — never a whole block more
            shared = _common(prev, cur)
            assert t.reusable_blocks * bt <= shared < (t.reusable_blocks + 1) * bt
            extra += shared - t.reusable_blocks * bt
            checked += 1
    assert checked >= 100 and extra <= checked / 16


def test_tool_gaps_are_waited_scaled() -> None:
    gaps = [0.0, 4.0, 2.0]
    scale = 0.05
    prog = _program("g", [((i,), BLOCK, g, "bash") for i, g in enumerate(gaps)])
    with serve() as fake:
        res = Replay(Client(fake.url), _opts(time_scale=scale)).run_timed([(0.0, prog)])
    t = [x.t_s for x in fake.received]
    for i in (1, 2):
        waited = t[i] - t[i - 1]
        assert gaps[i] * scale <= waited < gaps[i] * scale + 1.0
    assert res.programs[0].gaps_s == pytest.approx(sum(gaps) * scale)
    s = summary(res)
    assert s["jct_mean_s"] >= sum(gaps) * scale
    assert s["engine_mean_s"] == pytest.approx(s["jct_mean_s"] - sum(gaps) * scale)


@pytest.mark.parametrize("field", ["vllm_xargs", "custom_params"])
def test_explicit_ids_name_program_tool_and_last_turn(field: str) -> None:
    with serve() as fake:
        Replay(Client(fake.url), _opts(id_field=field)).run_timed(
            [(0.0, HAND_MADE[0]), (0.3, HAND_MADE[1])]
        )
    sent = [x.body[field] for x in fake.received]
    assert sent == [
        {"program_id": "a", "last_turn": False, "tool": "bash"},
        {"program_id": "a", "last_turn": True},
        {"program_id": "b", "last_turn": True, "tool": "edit"},
    ]
    assert all(("vllm_xargs" in x.body) == (field == "vllm_xargs") for x in fake.received)


def test_no_ids_sends_none() -> None:
    with serve() as fake:
        Replay(Client(fake.url), _opts(ids="none")).run_timed([(0.0, HAND_MADE[0])])
    assert len(fake.received) == 2
    for x in fake.received:
        assert not {"vllm_xargs", "custom_params", "program_id"} & set(x.body)


def test_http_errors_are_counted_and_the_run_reports() -> None:
    progs = [_program(f"p{i}", [((i, 1), 2 * BLOCK, 0.0, None)] * 3) for i in range(6)]
    with serve(Behaviour(fail_from=4)) as fake:
        res = Replay(Client(fake.url), _opts(max_errors=2)).run_timed(
            [(0.1 * i, p) for i, p in enumerate(progs)]
        )
    assert res.stopped == "errors"
    assert res.errors == {"http 500": 2}
    s = summary(res)
    assert s["calls"] == 3 and s["errors"] == 2 and s["programs_failed"] == 2
    assert len(fake.received) <= 6  # stopped: no more requests after the second error


def test_a_server_that_goes_away_is_counted_as_refused() -> None:
    progs = [_program(f"p{i}", [((i,), BLOCK, 0.0, None)]) for i in range(5)]
    with serve(Behaviour(shutdown_after=2)) as fake:
        res = Replay(Client(fake.url, timeout_s=5.0), _opts(max_errors=3)).run_timed(
            [(0.3 * i, p) for i, p in enumerate(progs)]
        )
    assert summary(res)["calls"] == 2
    # the call that meets the closing server is cut ("disconnected"), later ones refused
    assert sum(res.errors.values()) == 3 and res.stopped == "errors"
    assert res.errors.get("refused", 0) >= 2 and set(res.errors) <= {"refused", "disconnected"}


def test_timeouts_are_counted() -> None:
    with serve(Behaviour(first_token_delay_s=2.0)) as fake:
        res = Replay(Client(fake.url, timeout_s=0.3), _opts(max_errors=1)).run_timed(
            [(0.0, HAND_MADE[1])]
        )
    assert res.errors == {"timeout": 1} and res.stopped == "errors"
    assert summary(res)["programs_failed"] == 1


def test_ctrl_c_reports_what_was_measured() -> None:
    prog = _program("long", [((i,), BLOCK, 0.0 if i == 0 else 1.0, None) for i in range(50)])

    def interrupt(r) -> None:
        if sum(len(p.calls) for p in r.programs) >= 3:
            raise KeyboardInterrupt

    with serve() as fake:
        res = Replay(Client(fake.url), _opts(time_scale=0.02), progress=interrupt).run_timed(
            [(0.0, prog)]
        )
    assert res.stopped == "interrupted"
    n = len(res.programs[0].calls)
    assert 3 <= n < 50 and res.programs[0].end_s is None
    # every call sent was measured, but the one in flight when ctrl-C came (the progress
    # tick runs beside the program's thread: one program, one call at a time)
    assert n <= len(fake.received) <= n + 1
    assert summary(res)["calls"] == n


def _cli_json(tmp_path: Path, argv: list[str]) -> tuple[int, dict]:
    out = tmp_path / "replay.json"
    rc = main(["replay", *argv, "--json", str(out)])
    return rc, json.loads(out.read_text())


def test_ab_ratios_come_from_both_servers(tmp_path: Path) -> None:
    fast, slow = Behaviour(), Behaviour(first_token_delay_s=0.05)
    with serve(fast) as a, serve(slow) as b:
        rc, doc = _cli_json(
            tmp_path,
            ["--endpoint", a.url, "--ab", b.url, "--programs", "2", "--max-context", "2048",
             "--concurrency", "2", "--time-scale", "0", "--max-output-tokens", "4"],
        )  # fmt: skip
    assert rc == 0
    assert len(a.received) == len(b.received) > 0
    assert [x.words for x in a.received] != []
    # the same prompts reached both servers (order may differ between the two runs)
    assert sorted(" ".join(x.words) for x in a.received) == sorted(
        " ".join(x.words) for x in b.received
    )
    ra, rb = (r["summary"] for r in doc["results"])
    ttft = [
        [c["ttft_s"] for p in r["programs"] for c in p["calls"] if c["ttft_s"] is not None]
        for r in doc["results"]
    ]
    assert ra["ttft_mean_s"] == pytest.approx(sum(ttft[0]) / len(ttft[0]))
    assert rb["ttft_mean_s"] == pytest.approx(sum(ttft[1]) / len(ttft[1]))
    assert doc["ratios"]["ttft_mean_s"] == pytest.approx(rb["ttft_mean_s"] / ra["ttft_mean_s"])
    assert doc["ratios"]["ttft_mean_s"] > 1.0  # B waits 50 ms before its first token
    assert doc["ratios"]["hit_rate"] == pytest.approx(rb["hit_rate"] / ra["hit_rate"])


def test_cli_ctrl_c_prints_and_writes_the_partial_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ttlpolicy.cli import replay as cli_replay

    def interrupt(self, r) -> None:
        if sum(len(p.calls) for p in r.programs) >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_replay._ProgressLine, "__call__", interrupt)
    with serve() as a, serve() as b:
        rc, doc = _cli_json(
            tmp_path,
            ["--endpoint", a.url, "--ab", b.url, "--programs", "4", "--max-context", "2048",
             "--concurrency", "1", "--time-scale", "0.05", "--max-output-tokens", "2"],
        )  # fmt: skip
        assert len(b.received) == 0  # B is not started after Ctrl-C
    assert rc == 130
    assert doc["results"][0]["summary"]["stopped"] == "interrupted"
    assert doc["results"][0]["summary"]["calls"] >= 2
    assert "JCT mean s" in capsys.readouterr().out


def test_cli_refused_endpoint_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with serve() as fake:
        url = fake.url
    rc = main(["replay", "--endpoint", url])
    err = capsys.readouterr().err
    assert rc == 2 and "refused" in err and url in err


def test_cli_capacity_reaches_the_most_agents_under_a_generous_bound(tmp_path: Path) -> None:
    with serve() as fake:
        rc, doc = _cli_json(
            tmp_path,
            ["--endpoint", fake.url, "--capacity", "--ttft-bound", "30", "--max-agents", "3",
             "--step-duration", "0.5", "--programs", "2", "--max-context", "1024",
             "--time-scale", "0.01", "--max-output-tokens", "2"],
        )  # fmt: skip
    assert rc == 0
    cap = doc["capacity"]
    assert [s["agents"] for s in cap["steps"]] == [1, 2, 3]
    assert cap["capacity_agents"] == 3 and cap["reached_max_agents"]
    assert all(s["summary"]["calls"] > 0 for s in cap["steps"])
    assert len(fake.received) >= sum(s["summary"]["calls"] for s in cap["steps"])
    # each step (and each copy of a program) is new text: the server's unbounded cache hits
    # no more than the step's own prefixes allow, though it saw every earlier step
    for step in cap["steps"]:
        s = step["summary"]
        assert s["hit_rate"] == pytest.approx(s["ideal_hit_rate"], abs=0.02)


def test_poisson_arrivals_are_the_simulators() -> None:
    from ttlpolicy.sim.workload import poisson_arrivals

    w = load_programs(DATA / "sessions", max_programs=1, max_context=1024)
    got = [(t, p.program_id) for t, p in w.poisson(0.5, seed=3)]
    want = [(t, p.program_id) for t, p in poisson_arrivals(w.sim_programs, 0.5, 3)]
    assert got == want and len(got) == len(w.programs)
    progs = [_program(f"p{i}", [((i,), BLOCK, 0.0, None)]) for i in range(3)]
    times = [0.0, 0.3, 0.6]
    with serve() as fake:
        res = Replay(Client(fake.url), _opts()).run_timed(list(zip(times, progs, strict=True)))
    for t, p in zip(times, res.programs, strict=True):
        assert t <= p.calls[0].start_s < t + 1.0  # sent when due, not before
    gaps = [b.t_s - a.t_s for a, b in zip(fake.received, fake.received[1:], strict=False)]
    assert all(g >= 0.3 - 0.01 for g in gaps)


@pytest.mark.parametrize(
    ("max_agents", "breaks_at", "want", "tried"),
    [
        (64, 6, 5, [1, 2, 4, 8, 6, 5]),  # doubling breaks at 8, bisection finds 5
        (64, 1, 0, [1]),  # not even one agent
        (5, 99, 5, [1, 2, 4, 5]),  # never breaks: the most tried, said so
        (64, 3, 2, [1, 2, 4, 3]),
    ],
)
def test_capacity_search(max_agents: int, breaks_at: int, want: int, tried: list[int]) -> None:
    from ttlpolicy.replay import find_capacity

    def measure(n: int) -> dict:  # TTFT p95 grows with the agents: over 1 s from breaks_at on
        return {"errors": 0, "calls": 10, "ttft_p95_s": 1.5 if n >= breaks_at else 0.5}

    r = find_capacity(measure, ttft_bound_s=1.0, max_agents=max_agents)
    assert r["capacity_agents"] == want
    assert [s["agents"] for s in r["steps"]] == tried
    assert r["reached_max_agents"] == (want == max_agents)


def test_capacity_step_with_errors_does_not_hold() -> None:
    from ttlpolicy.replay import find_capacity

    def measure(n: int) -> dict:
        return {"errors": int(n >= 2), "calls": 10, "ttft_p95_s": 0.1}

    assert find_capacity(measure, ttft_bound_s=1.0)["capacity_agents"] == 1
