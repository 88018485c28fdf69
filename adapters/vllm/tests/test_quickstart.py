"""docs/vllm.md's CPU quickstart, run as the guide gives it: its commands are read out of the
guide (steps 2 to 4: the tiny model, the server, the client script, the ``curl`` of the
metrics), run in this venv, and what they print is compared with the outputs the guide shows.
Step 1 (the install) is how this venv was built (scripts/vllm-env.sh); tests/docs checks that
its lines name the same pin and lock file.

Two substitutions only, so that tests can run side by side: the model folder
(``build/tiny-llama``, git-ignored) goes under the test's temporary folder and port 8000 a free
port.  The guide's claim about stock vLLM is run too: the same server command without its
``--scheduler-cls`` line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from server import free_port, stop, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.engine]

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "vllm.md"
GUIDE_MODEL = "build/tiny-llama"
GUIDE_PORT = "8000"
STEP_TIMEOUT_S = 300.0


def quickstart() -> str:
    text = GUIDE.read_text()
    start = text.index("## Quickstart on a CPU")
    return text[start : text.index("\n## ", start + 1)]


def blocks(info: str) -> list[str]:
    """Bodies of the quickstart's fenced blocks whose info string is ``info``."""
    found = re.findall(r"^```([^\n]*)\n(.*?)^```$", quickstart(), re.M | re.S)
    return [body for lang, body in found if lang.strip() == info]


def one(info: str, holding: str) -> str:
    (body,) = [b for b in blocks(info) if holding in b]
    return body


def shown_output(after: str) -> str:
    """The ``text`` block the guide shows after the sentence containing ``after``."""
    section = quickstart()
    m = re.search(re.escape(after) + r".*?```text\n(.*?)```", section, re.S)
    assert m, f"the guide shows no output after {after!r}"
    return m.group(1).strip()


def localise(command: str, model: Path, port: int) -> str:
    assert GUIDE_MODEL in command or GUIDE_PORT in command, command
    return command.replace(GUIDE_MODEL, str(model)).replace(GUIDE_PORT, str(port))


def env_with_this_venv(tmp_path: Path) -> dict[str, str]:
    """The guide's shell: this venv's ``python`` first on PATH; vLLM's cache kept apart."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["VLLM_CACHE_ROOT"] = str(tmp_path / "vllm-cache")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real server layout, as in the guide
    return env


def bash(command: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=STEP_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, f"`{command}` failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def guide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Step 2, as written."""
    tmp = tmp_path_factory.mktemp("quickstart")
    model = tmp / "tiny-llama"
    bash(localise(one("bash", "scripts/tiny-model.py"), model, 0), env_with_this_venv(tmp))
    assert (model / "config.json").exists() and (model / "tokenizer.json").exists()
    return model


def run_program(command: str, model: Path, tmp_path: Path, scrape: bool) -> tuple[str, str]:
    """Starts the server ``command`` (step 3), runs the client (step 4) and, with ``scrape``,
    the ``curl`` of the metrics against it; returns what each printed."""
    port = free_port()
    env = env_with_this_venv(tmp_path)
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", localise(command, model, port)], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, log)
        script = tmp_path / "client.py"
        script.write_text(localise(one("python client", "OpenAI("), model, port))
        client = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True,
            timeout=STEP_TIMEOUT_S,
        )  # fmt: skip
        assert client.returncode == 0, client.stderr
        (curl,) = [line for line in one("bash", "curl").splitlines() if line.startswith("curl ")]
        metrics = bash(localise(curl, model, port), env) if scrape else ""
    finally:
        stop(proc)
    return client.stdout.strip(), metrics.strip()


def test_the_quickstart_prints_what_the_guide_shows(guide_model: Path, tmp_path: Path) -> None:
    server = one("bash", "api_server")
    printed, metrics = run_program(server, guide_model, tmp_path, scrape=True)
    assert printed == shown_output("The script prints")
    assert metrics == shown_output("The counters:")


def test_stock_vllm_loses_the_context_as_the_guide_says(guide_model: Path, tmp_path: Path) -> None:
    server = one("bash", "api_server")
    stock = "\n".join(line for line in server.splitlines() if "--scheduler-cls" not in line)
    stock = stock.rstrip(" \\")  # the line before it ended in a continuation
    assert stock != server
    printed, _ = run_program(stock, guide_model, tmp_path, scrape=False)
    claimed = re.search(r"the same server\s+evicts them .*? prints `([^`]+)`", quickstart(), re.S)
    assert claimed, "the guide's stock-vLLM sentence is gone"
    assert printed == claimed.group(1)
