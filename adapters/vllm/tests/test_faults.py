"""Faults in the real engine: the vLLM HTTP server with TTLScheduler under a bounded load of
agent clients that disconnect during generation and during tool calls, abort one of two
sibling requests, and send malformed ``vllm_xargs``; afterwards every KV block is free, no
pin is left, the adapter tracks no request, and the server still answers.

Bounded: ``TTLPOLICY_FAULT_CLIENTS`` clients (default 32) for ``TTLPOLICY_FAULT_SECONDS``
(default 60) on loopback; every HTTP call has a timeout and the server is stopped whatever
happens.  An in-process engine test drives the same faults step by step and checks the
adapter's own maps directly."""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from server import REQUEST_TIMEOUT_S, get_text, post, serve

from vllm_engine import TEST_POLICY, make_engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]

CLIENTS = int(os.environ.get("TTLPOLICY_FAULT_CLIENTS", "32"))
DURATION_S = float(os.environ.get("TTLPOLICY_FAULT_SECONDS", "60"))
NUM_BLOCKS = 65  # 64 usable blocks of 32 tokens: far less than 32 programs' contexts
MAX_TTL_S = 4.0
VOCAB = 250  # token ids below the test tokenizer's size
MAX_PROMPT = 400  # + up to 24 output tokens stays under --max-model-len 512
TOOLS = ["bash", "search", "read_file", "python"]

#: Client input the adapter must survive: each request is served or refused (4xx), never 5xx.
BAD_XARGS: list[Any] = [
    {"program_id": ["a", "b"]},
    {"program_id": {"nested": 1}},
    {"program_id": "p" * 100_000},
    {"program_id": ""},
    {"program_id": 7, "last_turn": "maybe"},
    {"program_id": True},
    {"program_id": "bad-tool", "tool": "t" * 100_000},
    {"program_id": "bad-tool", "tool": 12},
    {"program_id": "bad-tool", "tool": "\x00\n"},
    {"last_turn": [1]},
    "not-an-object",
    [1, 2],
    17,
    None,
]
#: Lone surrogates: vLLM 0.32 itself answers 500 for one in any string of the sampling
#: parameters (an ``extra_args`` key the adapter never reads, a ``stop`` string), before the
#: scheduler sees the request.  Sent all the same: the server must stay up.
VLLM_500_XARGS: list[Any] = [
    {"program_id": "\ud800"},
    {"program_id": "bad-tool", "tool": "\ud800"},
    {"unrelated": "\ud800"},
]


def _body(prompt: list[int], max_tokens: int, xargs: Any = ..., stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }
    if xargs is not ...:
        body["vllm_xargs"] = xargs
    return json.dumps(body).encode()


class Client(threading.Thread):
    """One agent after another until the deadline: turns with tool calls in between, and
    faults drawn at random."""

    def __init__(self, port: int, cid: int, deadline: float, tally: Counter, errors: list) -> None:
        super().__init__(daemon=True)
        self.port, self.cid, self.deadline = port, cid, deadline
        self.rng = random.Random(cid)
        self.tally, self.errors = tally, errors

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(3, VOCAB) for _ in range(n)]

    def request(
        self,
        body: bytes,
        disconnect_after_s: float | None = None,
        headers: dict | None = None,
        vllm_500: bool = False,
    ) -> dict[str, Any] | None:
        """POST /v1/completions; with ``disconnect_after_s`` the client hangs up after that
        long (mid-generation for a stream: after its first chunk).  Returns the JSON of a
        200 answer, else None; a 5xx or a broken connection the client did not cause is
        recorded as an error."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            conn.request(
                "POST",
                "/v1/completions",
                body,
                {"Content-Type": "application/json", **(headers or {})},
            )
            if disconnect_after_s is not None:
                conn.sock.settimeout(disconnect_after_s)
                try:
                    resp = conn.getresponse()
                    resp.fp.readline()  # first bytes of the answer (a stream's first chunk)
                    time.sleep(disconnect_after_s)
                except TimeoutError:
                    pass
                conn.sock.shutdown(socket.SHUT_RDWR)
                self.tally["disconnects"] += 1
                return None
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 500 and vllm_500:
                self.tally["vLLM's own 500"] += 1
            elif resp.status >= 500:
                self.errors.append(f"HTTP {resp.status} for {body[-300:]!r}: {data[:300]!r}")
            elif resp.status >= 400:
                self.tally["refused (4xx)"] += 1
            else:
                self.tally["served"] += 1
                return json.loads(data)
        except (OSError, http.client.HTTPException) as e:
            if disconnect_after_s is None:
                self.errors.append(f"client {self.cid}: {type(e).__name__}: {e}")
        finally:
            conn.close()
        return None

    def run(self) -> None:
        n = 0
        while time.monotonic() < self.deadline:
            n += 1
            self.program(f"c{self.cid}-p{n}")

    def program(self, pid: str) -> None:
        rng = self.rng
        context = self.tokens(rng.randint(30, 150))
        for turn in range(rng.randint(1, 5)):
            last = turn == 4 or len(context) > MAX_PROMPT - 60 or rng.random() < 0.25
            xargs = {"program_id": pid, "tool": rng.choice(TOOLS), "last_turn": int(last)}
            max_tokens = rng.randint(4, 24)
            fault = rng.random()
            if fault < 0.08:
                self.request(_body(self.tokens(20), 4, rng.choice(BAD_XARGS)))
                if rng.random() < 0.2:
                    self.request(
                        _body(self.tokens(20), 4, rng.choice(VLLM_500_XARGS)), vllm_500=True
                    )
                if rng.random() < 0.5:  # an over-long client-chosen request id as well
                    self.request(_body(self.tokens(20), 4), headers={"X-Request-Id": "r" * 4000})
            if fault < 0.18:  # hang up mid-stream: vLLM aborts the request
                body = _body(context, max_tokens, xargs, stream=True)
                self.request(body, disconnect_after_s=rng.uniform(0.0, 0.3))
                return
            if fault < 0.26:  # give up waiting for a plain request
                self.request(_body(context, max_tokens, xargs), rng.uniform(0.01, 1.0))
                return
            if fault < 0.32:  # two requests of one program; one is aborted mid-way
                sibling = threading.Thread(
                    target=self.request,
                    args=(_body(context, max_tokens, xargs), rng.uniform(0.01, 0.5)),
                )
                sibling.start()
                self.request(_body(context[:-5], max_tokens, xargs))
                sibling.join()
                return
            out = self.request(_body(context, max_tokens, xargs))
            if out is None or last:
                return
            context = context + out["choices"][0]["token_ids"] + self.tokens(rng.randint(5, 30))
            context = context[:MAX_PROMPT]
            if rng.random() < 0.1:  # the agent dies during its tool call: the pin must expire
                self.tally["died in a tool call"] += 1
                return
            time.sleep(min(rng.expovariate(2.0), 3.0))  # the tool runs


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_http_load_with_disconnects_aborts_and_bad_xargs(tiny_model: Path, tmp_path: Path) -> None:
    env = {
        # every finished turn is worth pinning (a miss costs 100 s); pins last <= 4 s
        "TTLPOLICY_POLICY": json.dumps(
            {"prefill_base_s": 100.0, "prior_mean_s": 1.0, "max_ttl_s": MAX_TTL_S}
        ),
        "TTLPOLICY_LOG_INTERVAL_S": "0.5",
    }
    with serve(tiny_model, tmp_path, NUM_BLOCKS, env, "--max-num-seqs", "16") as (base, proc, log):
        port = int(base.rsplit(":", 1)[1])
        tally: Counter = Counter()
        errors: list[str] = []
        t0 = time.monotonic()
        clients = [Client(port, i, t0 + DURATION_S, tally, errors) for i in range(CLIENTS)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(timeout=DURATION_S + 2 * REQUEST_TIMEOUT_S)
        assert not any(c.is_alive() for c in clients), "a client hung"
        print(f"load: {CLIENTS} clients, {time.monotonic() - t0:.0f} s: {dict(tally)}")
        assert not errors, errors[:10]
        assert proc.poll() is None, "the server died"
        assert tally["served"] > CLIENTS and tally["disconnects"] > 0
        assert tally["refused (4xx)"] + tally["served"] > 0

        # Pins end by their deadline; the next step releases them.  Then the server answers
        # and every block is free.
        time.sleep(MAX_TTL_S + 1.0)
        for _ in range(2):
            probe = post(
                base + "/v1/completions",
                {"model": "tiny", "prompt": [5] * 40, "max_tokens": 4, "ignore_eos": True},
            )
            assert probe["usage"]["completion_tokens"] == 4
            time.sleep(0.6)  # past the log interval: the next step logs the gauges
        metrics = get_text(base + "/metrics")
        assert _metric(metrics, "vllm:num_requests_running") == 0
        assert _metric(metrics, "vllm:num_requests_waiting") == 0
        assert _metric(metrics, "vllm:kv_cache_usage_perc") == 0.0
    text = log.read_text(errors="replace").split("[shutdown]")[0]  # up to the stop we sent
    lines = re.findall(
        r"ttlpolicy: pins=(\d+) \(blocks now (\d+)\) expiries=(\d+) reclaims=(\d+)", text
    )
    assert lines, text[-4000:]
    pins, blocks_now, expiries, reclaims = map(int, lines[-1])
    print(f"adapter: pins={pins} blocks now={blocks_now} expiries={expiries} reclaims={reclaims}")
    # the load did pin, and pins ended by deadline or under memory pressure (with 64 blocks
    # for 32 clients, reclaims usually come first)
    assert pins > 0 and expiries + reclaims > 0
    assert blocks_now == 0
    assert "Traceback" not in text and "EngineDeadError" not in text, text[-4000:]


def test_random_faults_in_process_leave_no_state_behind(tiny_model: Path) -> None:
    """The same faults, step by step in one engine, then the adapter's own maps are empty:
    nothing it keeps per request or per program outlives the requests."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    engine = make_engine(tiny_model, "ttlpolicy_vllm.TTLScheduler", NUM_BLOCKS)
    mp.undo()
    try:
        rng = random.Random(5)
        sched = engine.scheduler
        clock = engine.clock
        assert clock is not None
        live: list[str] = []
        for step in range(600):
            r = rng.random()
            if r < 0.25:
                pid = f"p{rng.randrange(12)}"
                xargs: dict[str, Any] = {"program_id": pid, "tool": rng.choice(TOOLS)}
                if rng.random() < 0.3:
                    xargs["last_turn"] = True
                if rng.random() < 0.1:
                    xargs = {"program_id": rng.choice([["x"], "p" * 1000, "", 3.5])}
                prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(20, 300))]
                rid = "r" * rng.choice([1, 2000]) + f"{step:05d}"  # some over-long ids
                live.append(engine.submit(prompt, rng.randint(2, 16), rid=rid, **xargs))
            elif r < 0.35 and live:
                engine.abort(live.pop(rng.randrange(len(live))))
            elif r < 0.45:
                clock.advance(rng.uniform(0.0, 10.0))
            engine.step()
        # A program's request aborted while its sibling waits: the sibling is re-admitted as
        # a new program (the queue's readmit path), which must leave nothing behind either.
        first = engine.submit([7] * 300, 8, program_id="siblings", tool="bash")
        engine.step()
        engine.submit([9] * 300, 8, program_id="siblings", tool="bash")
        engine.abort(first)
        engine.run()
        clock.advance(1000.0)  # past every deadline
        engine.turn([5] * 40, 2)  # one more step expires them
        queue = sched.waiting
        assert sched.pins.held_blocks() == 0 and sched.programs.pin_count == 0
        assert engine.free_blocks() == NUM_BLOCKS - 1
        assert not sched._programs_of and sched.life.held_count == 0
        assert not queue._popped and not queue._removed
        assert len(queue) == 0
        assert sched.ttl_metrics.pins > 0  # the faults hit pinned programs too
        # load control (on by default) tracks exactly the programs the ProgramScheduler
        # does, none of them still waiting for admission once every request ran
        ac = sched.admission
        assert ac.program_count == sched.programs.program_count and ac.waiting_count == 0
        assert all(ac.admitted(p) for p in sched.eviction.programs())  # no ended program
    finally:
        engine.llm.llm_engine.engine_core.shutdown()
