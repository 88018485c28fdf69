"""The session an agent client already sends names its program: ``AgentHeaders`` carries it
into the body (an ASGI app driven here directly), ``program_of`` reads it after explicit ids,
and on vLLM's real HTTP server a request with ``X-Claude-Code-Session-Id`` and no body field
is that program, a sub-agent's is a program of its own, and the same header under another
``cache_salt`` names another tenant's program."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from server import REQUEST_TIMEOUT_S, serve
from test_serve import scrape

from ttlpolicy.agent_headers import AGENT_FIELD, SESSION_FIELD
from ttlpolicy_vllm.identity import program_of, tenant_of
from ttlpolicy_vllm.middleware import AgentHeaders
from vllm_engine import BLOCK

CLAUDE_SESSION = "x-claude-code-session-id"
CLAUDE_AGENT = "x-claude-code-agent-id"


def through(
    body: bytes,
    headers: dict[str, str],
    path: str = "/v1/completions",
    chunk_bytes: int = 0,
    content_length: bytes | None = None,
    **kwargs: Any,
) -> tuple[bytes, dict[bytes, bytes]]:
    """What the app behind ``AgentHeaders`` receives of a POST: (body, headers);
    ``content_length``: the header as sent (default: the body's length)."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        seen["body"], seen["headers"] = b"".join(parts), dict(scope["headers"])

    step = chunk_bytes or max(1, len(body))
    chunks = [body[i : i + step] for i in range(0, len(body), step)] or [b""]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    length = str(len(body)).encode() if content_length is None else content_length
    raw.append((b"content-length", length))
    scope = {"type": "http", "method": "POST", "path": path, "headers": raw}
    asyncio.run(AgentHeaders(app, **kwargs)(scope, receive, lambda m: asyncio.sleep(0)))
    return seen["body"], seen["headers"]


def xargs_of(body: bytes) -> Any:
    return json.loads(body).get("vllm_xargs")


def test_the_header_is_carried_into_vllm_xargs() -> None:
    body = json.dumps({"model": "m", "prompt": [1, 2], "vllm_xargs": {"tool": "bash"}}).encode()
    out, headers = through(body, {CLAUDE_SESSION: "s-1", CLAUDE_AGENT: "a-2"}, chunk_bytes=5)
    assert xargs_of(out) == {"tool": "bash", SESSION_FIELD: "s-1", AGENT_FIELD: "a-2"}
    assert headers[b"content-length"] == str(len(out)).encode()
    out, _ = through(json.dumps({"prompt_cache_key": "k"}).encode(), {})
    assert xargs_of(out) == {SESSION_FIELD: "k"}


def test_everything_else_passes_byte_for_byte() -> None:
    plain = b'{"prompt": [1],  "vllm_xargs": {"program_id": "p"}}'
    assert through(plain, {})[0] == plain  # no session named
    for body in (b"not json", b"[1, 2]", b'{"vllm_xargs": 3}', b'{"x": 1'):
        assert through(body, {CLAUDE_SESSION: "s"})[0] == body
    own = b'{"vllm_xargs": {"ttlpolicy_session": "mine"}}'  # the client's own field wins
    assert through(own, {CLAUDE_SESSION: "s"})[0] == own
    assert through(plain, {CLAUDE_SESSION: "s"}, path="/v1/models")[0] == plain
    big = json.dumps({"prompt": "x" * 300}).encode()
    assert through(big, {CLAUDE_SESSION: "s"}, max_body_bytes=100)[0] == big
    assert through(big, {CLAUDE_SESSION: "s"}, chunk_bytes=30, max_body_bytes=100)[0] == big


def test_anthropic_messages_carry_the_session() -> None:
    """``/v1/messages`` (vLLM's Anthropic API, the one Claude Code calls) passes
    ``vllm_xargs`` on to its chat completion: the session is carried there too."""
    body = json.dumps({"model": "m", "max_tokens": 4, "messages": []}).encode()
    out, _ = through(body, {CLAUDE_SESSION: "s-1"}, path="/v1/messages")
    assert xargs_of(out) == {SESSION_FIELD: "s-1"}
    assert through(body, {CLAUDE_SESSION: "s-1"}, path="/v1/messages/count_tokens")[0] == body


@pytest.mark.parametrize(
    "length",
    ["\u00b2".encode("latin-1"), "\u0663".encode(), b"-5", b" 9", b"0x10", b""],
)
def test_a_content_length_that_is_no_number_is_read_within_the_cap(length: bytes) -> None:
    """A Content-Length of anything but ASCII digits (``"²".isdigit()`` is true, and ``int``
    refuses it) raises nothing: the body is read, within the cap, as without the header."""
    body = json.dumps({"prompt": "x"}).encode()
    out, _ = through(body, {CLAUDE_SESSION: "s"}, content_length=length)
    assert xargs_of(out) == {SESSION_FIELD: "s"}
    # digits: leading zeros are still the number; many digits (``int`` refuses over 4300)
    # are over the cap, passed on as they came
    out, _ = through(body, {CLAUDE_SESSION: "s"}, content_length=b"0" * 40 + b"9")
    assert xargs_of(out) == {SESSION_FIELD: "s"}
    for many in (b"9" * 40, b"1" * 5000):
        assert through(body, {CLAUDE_SESSION: "s"}, content_length=many)[0] == body


def test_a_rewritten_body_grows_by_the_added_field_only() -> None:
    """Text is written as itself (UTF-8), not as ``\\u`` escapes (``é`` took 6 bytes for 2: a
    body within the cap came out ~3 x it); a lone surrogate, which UTF-8 cannot hold, stays
    escaped; a body that would still grow (numbers written back longer) passes as it came."""
    added = len(b',"vllm_xargs":{"ttlpolicy_session":"s-1"}')
    request = {"prompt": "h\u00e9llo \u65e5\u672c \U0001f600 " * 500 + '"\\\n\x7f', "n": 1}
    body = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
    out, headers = through(body, {CLAUDE_SESSION: "s-1"})
    assert len(out) <= len(body) + added
    assert json.loads(out.decode("utf-8")) == {**request, "vllm_xargs": {SESSION_FIELD: "s-1"}}
    assert headers[b"content-length"] == str(len(out)).encode()
    lone = b'{"prompt":"a\\ud800b\\udfff"}'
    out, _ = through(lone, {CLAUDE_SESSION: "s-1"})
    assert len(out) <= len(lone) + added
    assert json.loads(out.decode("utf-8"))["prompt"] == "a\ud800b\udfff"
    grows = b'{"prompt":[' + b",".join([b"1e9"] * 1000) + b"]}"
    assert through(grows, {CLAUDE_SESSION: "s-1"})[0] == grows


def request(extra: Any = None, salt: Any = None, session_id: Any = None) -> SimpleNamespace:
    return SimpleNamespace(
        sampling_params=SimpleNamespace(extra_args=extra), cache_salt=salt, session_id=session_id
    )


def test_explicit_ids_come_first_then_the_carried_session() -> None:
    carried = {SESSION_FIELD: "s", AGENT_FIELD: "a"}
    for explicit, want in ((request({**carried, "program_id": "p"}), "p"),
                           (request(carried, session_id="v"), "v"),
                           (request(carried), "s/agent:a"),
                           (request({SESSION_FIELD: "s"}), "s")):  # fmt: skip
        info = program_of(explicit)
        assert info is not None and info.program_id == want
    assert program_of(request({SESSION_FIELD: "s", AGENT_FIELD: ""})) is None
    a, b = program_of(request(carried, "salt-a")), program_of(request(carried, "salt-b"))
    assert a is not None and b is not None and a.program_id != b.program_id
    assert tenant_of(request(carried, "salt-a")) != tenant_of(request(carried, "salt-b"))


NUM_BLOCKS = 97  # room for three programs' pins within the default budget (half)


def post(base: str, tokens: list[int], max_tokens: int, headers: dict[str, str],
         salt: str) -> dict[str, Any]:  # fmt: skip
    body = {
        "model": "tiny", "prompt": tokens, "max_tokens": max_tokens, "temperature": 0.0,
        "ignore_eos": True, "return_token_ids": True, "cache_salt": salt,
    }  # fmt: skip
    req = urllib.request.Request(
        base + "/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
@pytest.mark.engine
def test_agent_headers_over_http(tiny_model: Path, tmp_path: Path) -> None:
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    env = {
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
    }
    extra = ("--middleware", "ttlpolicy_vllm.middleware.AgentHeaders")
    session = {CLAUDE_SESSION: "cc-session-1"}
    with serve(tiny_model, tmp_path, NUM_BLOCKS, env, *extra) as (base, _, log):
        prompt = [3 + (i * 37) % 240 for i in range(201)]
        turn1 = post(base, prompt, 24, session, "tenant-a")
        context = prompt + turn1["choices"][0]["token_ids"]

        def counters() -> tuple[float, ...]:
            m = scrape(base)
            return tuple(
                m.get((f"ttlpolicy_{name}_total", ()), -1.0)
                for name in ("pins", "pins_handed_over", "returns_hit")
            )

        assert counters() == (1, 0, 0), log.read_text()[-3000:]  # the session is a program
        # another tenant forging the header, continuing the owner's context: a program of
        # its own tenant (pinned on its own), taking nothing of the owner's
        post(base, context + [7] * 10, 4, session, "tenant-b")
        assert counters() == (2, 0, 0)
        # a sub-agent forks its parent's context: a program of its own, not the parent's pin
        post(base, context + [9] * 10, 4, {**session, CLAUDE_AGENT: "agent-1"}, "tenant-a")
        assert counters() == (3, 0, 0)
        # the session's second call takes its pin, and hits it
        turn2 = post(base, context + [5] * 20, 4, session, "tenant-a")
        assert counters() == (4, 1, 1)
        hit_tokens = turn2["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert hit_tokens == ((len(context) - 1) // BLOCK) * BLOCK


#: A chat template for the tiny model (it has none): each message's role and text.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


def anthropic(base: str, text: str, headers: dict[str, str]) -> dict[str, Any]:
    """A call to vLLM's Anthropic Messages API, as Claude Code makes it."""
    body = {
        "model": "tiny", "max_tokens": 8, "temperature": 0.0, "cache_salt": "tenant-a",
        "messages": [{"role": "user", "content": text}],
    }  # fmt: skip
    req = urllib.request.Request(
        base + "/v1/messages",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "anthropic-version": "2023-06-01", **headers},
    )
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
@pytest.mark.engine
def test_claude_codes_messages_api_over_http(tiny_model: Path, tmp_path: Path) -> None:
    """On vLLM's real server, a ``/v1/messages`` call naming no session is anonymous (no
    pin), and the same call with ``X-Claude-Code-Session-Id`` is that session's program: the
    middleware carried the header into ``vllm_xargs``, which vLLM's Anthropic API passes on
    to the engine (it was left out of the middleware's paths: never a program)."""
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    template = tmp_path / "chat.jinja"
    template.write_text(CHAT_TEMPLATE)
    env = {
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
    }
    extra = ("--middleware", "ttlpolicy_vllm.middleware.AgentHeaders", "--chat-template",
             str(template))  # fmt: skip
    text = "the agent reads the file and calls a tool; KV cache blocks are pinned " * 3
    with serve(tiny_model, tmp_path, NUM_BLOCKS, env, *extra) as (base, _, log):

        def pins() -> float:
            return scrape(base).get(("ttlpolicy_pins_total", ()), -1.0)

        reply = anthropic(base, text, {})
        assert reply["type"] == "message", reply
        assert pins() == 0, log.read_text()[-3000:]  # anonymous: its own one-call program
        anthropic(base, "bash: ls -la; " + text, {CLAUDE_SESSION: "cc-session-1"})
        assert pins() == 1, log.read_text()[-3000:]
