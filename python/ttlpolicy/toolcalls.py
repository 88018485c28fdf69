"""Which tool did the model just call?  Read from its output text when the client sends no name.

The tool name keys the duration history (``ToolHistory``), so an engine adapter that only sees
model output needs it recovered.  Recognised, in this order (structured formats first):

* OpenAI-style ``tool_calls`` JSON (``{"tool_calls": [{"function": {"name": ...}}]}``, a bare
  list of such calls, Mistral's ``[TOOL_CALLS]`` prefix);
* Hermes ``<tool_call>{"name": ...}</tool_call>``;
* Llama-3 ``<|python_tag|>`` (JSON call, ``tool.call(...)``, or code → ``"python"``) and a bare
  JSON ``{"name": ..., "parameters"|"arguments": ...}``;
* ReAct ``Action: name`` lines (the last one wins: it is the call the program waits on);
* a fenced ``bash``/``sh``/``shell`` block → ``"bash"``.

Model output is untrusted: only the last ``MAX_OUTPUT_CHARS`` characters are read (a call ends
the output), regular expressions are linear, JSON errors and deep nesting are caught, and a name
is returned only if it is 1..``MAX_TOOL_NAME_CHARS`` word-like characters.  Never raises on a str.
This module has no engine dependency: adapters call it with decoded text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._validate import MAX_TOOL_NAME_CHARS

#: Only the tail of the output is parsed: a tool call is the last thing a turn emits.
MAX_OUTPUT_CHARS = 65536

_NAME = re.compile(rf"[\w.:/\-]{{1,{MAX_TOOL_NAME_CHARS}}}")
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_CALL_EXPR = re.compile(r"\s*([A-Za-z_][\w.]{0,127}?)\.call\(")
_JSON_NAME = re.compile(rf'"name"\s*:\s*"([^"\\\n]{{1,{MAX_TOOL_NAME_CHARS}}})"')
_REACT = re.compile(rf"^[ \t]*Action[ \t]*:[ \t]*([^\s\[(]{{1,{MAX_TOOL_NAME_CHARS}}})", re.M)
_BASH_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|zsh|console)[ \t]*\n", re.IGNORECASE)


def _clean(name: Any) -> str | None:
    """A usable tool name or None: a str made only of word-like characters, short."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    if _NAME.fullmatch(name) is None:
        return None
    return name


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _name_in_call(call: Any) -> str | None:
    """The name of one call object: ``{"function": {"name": n}}`` or ``{"name": n}``."""
    if not isinstance(call, dict):
        return None
    fn = call.get("function")
    if isinstance(fn, dict) and "name" in fn:
        return _clean(fn.get("name"))
    return _clean(call.get("name"))


def _name_in_json(obj: Any) -> str | None:
    """First call name in a parsed JSON value: a call, a list of calls, or
    ``{"tool_calls": [...]}``."""
    if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list):
        obj = obj["tool_calls"]
    if isinstance(obj, list):
        for call in obj[:16]:
            name = _name_in_call(call)
            if name is not None:
                return name
        return None
    return _name_in_call(obj)


def _from_json_text(text: str) -> str | None:
    """A JSON call in ``text``: parsed when it is whole, else the first ``"name": "..."``."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    name = _name_in_json(_loads(stripped))
    if name is not None:
        return name
    m = _JSON_NAME.search(stripped)
    return _clean(m.group(1)) if m else None


def _from_python_tag(text: str) -> str | None:
    i = text.rfind(_PYTHON_TAG)
    if i < 0:
        return None
    body = text[i + len(_PYTHON_TAG) :]
    name = _from_json_text(body)
    if name is not None:
        return name
    m = _CALL_EXPR.match(body)
    if m:
        return _clean(m.group(1))
    return "python" if body.strip() else None  # code for Llama's built-in interpreter


def tool_name(output: Any) -> str | None:
    """The tool called at the end of a model's ``output``, or None when none is recognised."""
    if not isinstance(output, str) or not output:
        return None
    text = output[-MAX_OUTPUT_CHARS:]

    stripped = text.lstrip()
    if stripped.startswith("[TOOL_CALLS]"):
        name = _from_json_text(stripped[len("[TOOL_CALLS]") :])
        if name is not None:
            return name
    if '"tool_calls"' in text:
        start = text.find("{")
        name = _from_json_text(text[start:]) if start >= 0 else None
        if name is not None:
            return name
    if "<tool_call>" in text:
        for body in _HERMES.findall(text):
            name = _from_json_text(body)
            if name is not None:
                return name
    if _PYTHON_TAG in text:
        name = _from_python_tag(text)
        if name is not None:
            return name
    name = _from_json_text(text)  # Llama-3 style: the whole output is one JSON call
    if name is not None:
        return name
    actions = _REACT.findall(text)
    if actions:
        name = _clean(actions[-1])
        if name is not None:
            return name
    if _BASH_FENCE.search(text):
        return "bash"
    return None
