"""ttlpolicy.toolcalls: tool names recovered from model output in the formats engines emit."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy._validate import MAX_TOOL_NAME_CHARS
from ttlpolicy.toolcalls import MAX_OUTPUT_CHARS, tool_name

EXAMPLES = [
    # OpenAI chat-completions message with tool_calls
    (
        json.dumps(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            }
        ),
        "get_weather",
    ),
    # a bare list of calls (first wins)
    ('[{"name": "read_file", "arguments": {"path": "a"}}, {"name": "ls"}]', "read_file"),
    # Mistral
    ('[TOOL_CALLS][{"name": "search_web", "arguments": {"q": "x"}}]', "search_web"),
    # Hermes / Qwen
    (
        'Let me check.\n<tool_call>\n{"name": "list_dir", "arguments": {"path": "/"}}\n'
        "</tool_call>",
        "list_dir",
    ),
    # Hermes, truncated before the closing tag
    ('<tool_call>\n{"name": "grep", "arguments": {"pattern": "TODO"', "grep"),
    # Llama 3.1 JSON tool call
    ('{"name": "calculator", "parameters": {"expr": "2+2"}}', "calculator"),
    # Llama 3.1 built-in tool and code interpreter
    ('<|python_tag|>brave_search.call(query="kv cache")', "brave_search"),
    ("<|python_tag|>import math\nprint(math.pi)", "python"),
    ('<|python_tag|>{"name": "run_tests", "parameters": {}}', "run_tests"),
    # ReAct: the last Action line is the pending call
    (
        "Thought: look it up\nAction: wiki_search[CacheTTL]\nObservation: ...\n"
        "Thought: now compute\nAction: calculator\nAction Input: 3*7\n",
        "calculator",
    ),
    # a fenced shell block
    ("I'll run the tests:\n```bash\npytest -q\n```\n", "bash"),
    ("```sh\nls -la\n```", "bash"),
    # no tool call
    ("The answer is 42.", None),
    ("```python\nprint(1)\n```", None),
    ("", None),
    # a name that is not a name
    ('{"name": "rm -rf /; echo pwned", "arguments": {}}', None),
    ('{"name": 17, "arguments": {}}', None),
]


@pytest.mark.parametrize(("output", "expected"), EXAMPLES)
def test_examples(output: str, expected: str | None) -> None:
    assert tool_name(output) == expected


def test_non_str_is_none() -> None:
    for value in (None, 3, b"<tool_call>", ["x"]):
        assert tool_name(value) is None


def test_long_name_is_refused_not_truncated() -> None:
    # a cut name would key a different tool's history: refuse it
    long_name = "t" * (MAX_TOOL_NAME_CHARS + 1)
    assert tool_name(json.dumps({"name": long_name, "arguments": {}})) is None
    ok = "t" * MAX_TOOL_NAME_CHARS
    assert tool_name(json.dumps({"name": ok, "arguments": {}})) == ok


def test_only_the_tail_is_read() -> None:
    # a call followed by more than MAX_OUTPUT_CHARS of prose is out of reach...
    head = "<tool_call>\n" + json.dumps({"name": "early"}) + "\n</tool_call>"
    assert tool_name(head + "x" * MAX_OUTPUT_CHARS) is None
    # ...but one at the end of a huge output is found
    assert tool_name("x" * (10 * MAX_OUTPUT_CHARS) + head) == "early"


def test_deep_nesting_does_not_raise() -> None:
    assert tool_name("[" * 100_000) is None
    assert tool_name('{"tool_calls": ' + "[" * 50_000) is None


def test_adversarial_input_is_fast() -> None:
    # patterns that make backtracking regexes quadratic; the bound keeps each call short
    nasty = [
        "<tool_call>" * 20_000,
        '"name"' + " " * 60_000,
        "Action:" + " " * 60_000,
        "```" * 30_000,
        "<|python_tag|>" * 5_000,
        '{"name": "' + "a" * 60_000,
    ]
    for text in nasty:
        start = time.perf_counter()
        tool_name(text)
        # generous: a linear scan of 64 KiB takes milliseconds
        assert time.perf_counter() - start < 1.0, text[:20]


name_chars = st.characters(whitelist_categories=("Lu", "Ll", "Nd"), whitelist_characters="_-.")


@given(st.text(min_size=1, max_size=MAX_TOOL_NAME_CHARS, alphabet=name_chars))
def test_any_valid_name_round_trips_in_every_json_format(name: str) -> None:
    call = {"name": name, "arguments": {"x": 1}}
    formats = [
        json.dumps({"tool_calls": [{"type": "function", "function": call}]}),
        "<tool_call>\n" + json.dumps(call) + "\n</tool_call>",
        "<|python_tag|>" + json.dumps(call),
        json.dumps(call),
        "[TOOL_CALLS]" + json.dumps([call]),
    ]
    for text in formats:
        assert tool_name(text) == name, text


fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        '"tool_calls"',
        '{"name": "',
        '"function": {',
        "Action: ",
        "\n",
        "```bash\n",
        "```",
        "{",
        "[",
        "}",
        "]",
        '"',
        ".call(",
        "\ud800",
    ]
)


@given(st.lists(st.one_of(st.text(max_size=40), fragments), max_size=40).map("".join))
def test_fuzz_never_raises_and_returns_a_short_name(text: str) -> None:
    name = tool_name(text)
    assert name is None or (isinstance(name, str) and 1 <= len(name) <= MAX_TOOL_NAME_CHARS)
    if name is not None:
        assert name == name.strip() and name.isprintable()
