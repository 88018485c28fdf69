"""SGLang's Model Gateway (``sglang-router`` 0.3.2, the real Rust binary from its wheel) with
``--policy manual`` in front of three fake SGLang workers on localhost, as docs/routers.md
tells a deployment to run it.  Shown:

* every call carrying ``X-SMG-Routing-Key: <program id>`` reaches the same worker, whichever
  endpoint it uses, and the programs are spread over the workers;
* the engine behind the gateway can name the program: what reached the worker, read the way
  SGLang 0.5.23 builds its request, gives ``ttlpolicy_sglang.identity.program_of`` the program id
  (on the OpenAI endpoints SGLang takes ``routing_key`` from that same header; the gateway drops
  ``custom_params`` on ``/generate`` and ``/v1/chat/completions``, and only ``extra_key``
  survives on ``/generate``);
* when a worker stops, its programs move to live workers and stay there, no call fails (with
  ``--cb-failure-threshold 1``), the other programs do not move, and calls without the header
  are still served.

The workers are Python HTTP servers answering what the gateway probes (``/health``,
``/server_info``, ``/model_info``, ``/get_load``) and recording every call; they hold no model.
Each test starts its own gateway (about 2 s) on free ports and always ends it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("sglang_router", reason="sglang-router is in requirements/ray.txt")

HEADER = "X-SMG-Routing-Key"
WORKERS = 3
PROGRAMS = 12  # random first assignment: all on one of 3 workers has probability 3 * 3**-12
CALL_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
#: The flags docs/routers.md gives: sticky policy; a dead worker's keys move at its first failed
#: call (circuit breaker) or its first failed health check, whichever comes first.
GATEWAY_FLAGS = (
    "--policy",
    "manual",
    "--cb-failure-threshold",
    "1",
    "--health-check-interval-secs",
    "1",
    "--health-failure-threshold",
    "1",
)
ENDPOINTS = ("/generate", "/v1/chat/completions", "/v1/completions")


def _load_identity() -> Any:
    """``ttlpolicy_sglang/identity.py`` itself, loaded from its file: the package's
    ``__init__`` imports SGLang, which this venv does not have; the module needs only
    ttlpolicy."""
    path = Path(__file__).parents[2] / "sglang/src/ttlpolicy_sglang/identity.py"
    spec = importlib.util.spec_from_file_location("ttlpolicy_sglang_identity", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


identity = _load_identity()


class FakeWorker:
    """An SGLang HTTP server as the gateway sees it: health and info probes answered, every
    POST recorded as (path, lower-cased headers, JSON body) and answered with its name.
    ``stop()`` closes its port; a call already connected is dropped unanswered."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.probes: list[str] = []
        self.stopped = False
        self._lock = threading.Lock()
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: a stop is final

            def _reply(self, payload: dict[str, Any]) -> None:
                out = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                if worker.stopped:
                    return
                with worker._lock:
                    worker.probes.append(self.path)
                self._reply({})

            def do_POST(self) -> None:
                if worker.stopped:
                    return
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with worker._lock:
                    worker.calls.append((self.path, headers, body))
                self._reply(
                    {
                        "worker": worker.name,
                        "text": "ok",
                        "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                    }
                )

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=0.05)  # stop() waits up to one interval

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._server.shutdown()
            self._server.server_close()

    def routing_keys(self) -> set[str | None]:
        """The routing keys of the calls this worker served."""
        with self._lock:
            return {headers.get(HEADER.lower()) for _, headers, _ in self.calls}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2.0) as response:
        return json.loads(response.read())


class Gateway:
    """``python -m sglang_router.launch_router`` on free ports, in its own process group."""

    def __init__(self, workers: list[FakeWorker], log: Path) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [
            sys.executable,
            "-m",
            "sglang_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            # its metrics listener defaults to port 29000: a second run would collide
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(_free_port()),
            "--log-level",
            "warn",
            "--worker-urls",
            *[w.url for w in workers],
            *GATEWAY_FLAGS,
        ]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready(len(workers))
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, workers: int) -> None:
        # /health answers before the workers are registered; /readiness counts them.
        deadline = time.monotonic() + START_TIMEOUT_S
        state: Any = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the gateway exited ({self.process.returncode}):\n{self.output()}")
            try:
                state = _get(self.base + "/readiness")
                if state.get("healthy_workers") == state.get("total_workers") == workers:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        pytest.fail(f"the gateway was not ready in {START_TIMEOUT_S} s ({state}):\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def call(self, path: str, key: str | None, body: dict[str, Any]) -> str:
        """POSTs ``body`` to ``path`` through the gateway; the name of the worker that served
        it.  A failed call fails the test."""
        headers = {"content-type": "application/json"}
        if key is not None:
            headers[HEADER] = key
        request = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
                served: str = json.loads(response.read())["worker"]
                return served
        except urllib.error.HTTPError as e:
            pytest.fail(f"{path} key={key}: HTTP {e.code} {e.read()[:300]!r}")

    def unhealthy(self) -> set[str]:
        return {w["url"] for w in _get(self.base + "/workers")["workers"] if not w["is_healthy"]}

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


@pytest.fixture
def fleet() -> Iterator[tuple[Gateway, list[FakeWorker]]]:
    workers = [FakeWorker(f"w{i}") for i in range(WORKERS)]
    with tempfile.TemporaryDirectory(prefix="ttlpolicy-gateway-") as tmp:
        gateway = None
        try:
            gateway = Gateway(workers, Path(tmp) / "gateway.log")
            yield gateway, workers
        finally:
            if gateway is not None:
                gateway.close()
            for w in workers:
                w.stop()


def _body(path: str, program: str) -> dict[str, Any]:
    """A call of ``program`` as docs/routers.md tells a client to send it: the id in the
    header (set by ``Gateway.call``) and in every body field the SGLang adapter reads."""
    hints = {"program_id": program, "tool": "search"}
    if path == "/generate":
        return {
            "text": "hello",
            "sampling_params": {"max_new_tokens": 4, "custom_params": hints},
            "routing_key": program,
            "extra_key": program,
        }
    common = {"model": "m", "max_tokens": 4, "custom_params": hints, "extra_key": program}
    if path == "/v1/chat/completions":
        return {**common, "messages": [{"role": "user", "content": "hello"}]}
    return {**common, "prompt": "hello"}


def _anonymous(path: str) -> dict[str, Any]:
    """A call that names no program."""
    body = _body(path, "")
    for field in ("routing_key", "extra_key", "custom_params"):
        body.pop(field, None)
    body.get("sampling_params", {}).pop("custom_params", None)
    return body


def _calls(gateway: Gateway, programs: list[str], rounds: int) -> dict[str, list[str]]:
    """``rounds`` calls of each program, interleaved round by round, each round on the next
    endpoint; the workers that served each program's calls."""
    served: dict[str, list[str]] = {p: [] for p in programs}
    for r in range(rounds):
        path = ENDPOINTS[r % len(ENDPOINTS)]
        for p in programs:
            served[p].append(gateway.call(path, p, _body(path, p)))
    return served


def _programs() -> list[str]:
    return [f"prog-{i}" for i in range(PROGRAMS)]


def test_a_program_stays_on_one_worker_and_programs_spread(
    fleet: tuple[Gateway, list[FakeWorker]],
) -> None:
    gateway, workers = fleet
    programs = _programs()
    served = _calls(gateway, programs, rounds=6)
    for program, names in served.items():
        assert len(set(names)) == 1, f"{program} was served by {names}"
    homes = {names[0] for names in served.values()}
    assert len(homes) >= 2, f"all {PROGRAMS} programs went to {homes}"
    # The workers' own records agree with the responses: each program's calls, and only
    # those, reached its home.
    for program, names in served.items():
        holders = [w.name for w in workers if program in w.routing_keys()]
        assert holders == [names[0]], (program, holders)
    assert sum(len(w.calls) for w in workers) == PROGRAMS * 6
    # What the gateway probes on a worker (docs/routers.md lists it).
    assert {"/health", "/server_info", "/model_info"} <= set(workers[0].probes)


def _engine_request(path: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    """The fields of SGLang 0.5.23's scheduler request (``Req``) that the adapter reads, as
    SGLang fills them from what reached the worker (read in its source): the OpenAI endpoints
    take ``routing_key`` from the ``x-smg-routing-key`` header
    (``serving_base.extract_routing_key``) and ``custom_params`` from the body; ``/generate``
    takes them all from the body, ``custom_params`` inside ``sampling_params``."""
    if path == "/generate":
        custom = (body.get("sampling_params") or {}).get("custom_params")
        routing_key = body.get("routing_key")
    else:
        custom = body.get("custom_params")
        routing_key = headers.get(HEADER.lower())
    return SimpleNamespace(
        sampling_params=SimpleNamespace(custom_params=custom),
        session_id=body.get("session_id"),
        routing_key=routing_key,
        extra_key=body.get("extra_key"),
    )


@pytest.mark.parametrize("path", ENDPOINTS)
def test_the_engine_behind_the_gateway_names_the_program(
    fleet: tuple[Gateway, list[FakeWorker]], path: str
) -> None:
    gateway, workers = fleet
    program = "agent-7/run-3"
    home = gateway.call(path, program, _body(path, program))
    [worker] = [w for w in workers if w.name == home]
    [(seen_path, headers, body)] = worker.calls
    assert seen_path == path
    assert headers[HEADER.lower()] == program  # the gateway forwards the header
    info = identity.program_of(_engine_request(path, headers, body))
    assert info is not None and info.program_id == program, (path, body)
    # What the gateway (0.3.2) keeps of the body: it re-serialises /generate and chat requests
    # through its own types.  docs/routers.md's advice rests on these.
    if path == "/generate":
        assert "custom_params" not in body["sampling_params"]
        assert "routing_key" not in body
        assert body["extra_key"] == program  # the only program field left for the engine
    elif path == "/v1/chat/completions":
        assert not {"custom_params", "extra_key"} & body.keys()  # the header is what is left
    else:
        assert body["custom_params"] == {"program_id": program, "tool": "search"}
        assert info.tool is not None  # the adapter's tool hint survives only here


def test_a_stopped_workers_programs_move_and_stick(
    fleet: tuple[Gateway, list[FakeWorker]],
) -> None:
    gateway, workers = fleet
    programs = _programs()
    home = {p: names[0] for p, names in _calls(gateway, programs, rounds=2).items()}
    # Stop the worker holding most programs.
    victim = max(workers, key=lambda w: sum(h == w.name for h in home.values()))
    moved = [p for p in programs if home[p] == victim.name]
    assert moved
    victim.stop()
    # Every call succeeds (Gateway.call fails the test otherwise), from the first one on.
    after = _calls(gateway, programs, rounds=4)
    for program, names in after.items():
        assert victim.name not in names, (program, names)
        assert len(set(names)) == 1, f"{program} was served by {names} after the stop"
        if program not in moved:
            assert names[0] == home[program], f"{program} moved: {home[program]} -> {names}"
    # The gateway's health check marks the stopped worker within a few seconds.
    deadline = time.monotonic() + 10.0
    while victim.url not in gateway.unhealthy() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gateway.unhealthy() == {victim.url}
    # Still where they went, and calls without the header are served by live workers.
    again = _calls(gateway, moved, rounds=2)
    assert all(names == [after[p][0]] * 2 for p, names in again.items()), (again, after)
    anonymous = [gateway.call(path, None, _anonymous(path)) for path in ENDPOINTS * 2]
    assert victim.name not in anonymous


def test_calls_without_the_header_are_served(fleet: tuple[Gateway, list[FakeWorker]]) -> None:
    gateway, workers = fleet
    served = [gateway.call(path, None, _anonymous(path)) for path in ENDPOINTS * 4]
    assert len(served) == 12
    assert set(served) <= {w.name for w in workers}
