"""docs/session.schema.json, the documented format of an agentic session file, holds: every
session shipped (the package's samples, the tests' excerpts) is valid under it, and a session
the reader (``ttlpolicy.traces.read_agentic``) refuses is invalid under it too.

``jsonschema`` is not a dependency, so a small checker of the keywords the schema uses
(``type``, ``required``, ``properties``, ``items``, ``oneOf``, ``not``, ``const``,
``minimum``, ``maximum``, ``$ref``) does the checking; it refuses any other keyword, so the
schema cannot grow a rule this test silently skips."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ttlpolicy.traces import TraceFormatError, open_text, read_agentic, sample_dir

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "session.schema.json").read_text())
SESSIONS = sorted(
    p
    for folder in (sample_dir(), ROOT / "tests" / "data" / "sessions")
    for p in folder.iterdir()
    if p.name.endswith((".json", ".json.gz"))
)
ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}
TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(value: Any, schema: dict[str, Any], where: str = "session") -> list[str]:
    """Where ``value`` breaks ``schema`` (empty: valid)."""
    found: list[str] = []
    for key, rule in schema.items():
        if key in ANNOTATIONS:
            continue
        if key == "$ref":
            target = SCHEMA
            for part in rule.removeprefix("#/").split("/"):
                target = target[part]
            found += errors(value, target, where)
        elif key == "type":
            kinds = rule if isinstance(rule, list) else [rule]
            if not any(TYPES[k](value) for k in kinds):
                found.append(f"{where}: not {rule}")
        elif key == "required":
            if isinstance(value, dict):
                found += [f"{where}.{f}: missing" for f in rule if f not in value]
        elif key == "properties":
            if isinstance(value, dict):
                for name, sub in rule.items():
                    if name in value:
                        found += errors(value[name], sub, f"{where}.{name}")
        elif key == "items":
            if isinstance(value, list):
                for i, item in enumerate(value):
                    found += errors(item, rule, f"{where}[{i}]")
        elif key == "oneOf":
            passing = sum(not errors(value, sub, where) for sub in rule)
            if passing != 1:
                found.append(f"{where}: matches {passing} of the oneOf alternatives, not 1")
        elif key == "not":
            if not errors(value, rule, where):
                found.append(f"{where}: matches what it must not")
        elif key == "const":
            if value != rule:
                found.append(f"{where}: not {rule!r}")
        elif key in ("minimum", "maximum"):
            if TYPES["number"](value) and (value < rule if key == "minimum" else value > rule):
                found.append(f"{where}: {value!r} beyond {key} {rule}")
        else:
            raise AssertionError(f"the checker does not know the keyword {key!r}")
    return found


def load(path: Path) -> Any:
    with open_text(path) as f:
        return json.load(f)


def test_the_samples_hold_sessions_with_sub_agents() -> None:
    assert len(SESSIONS) >= 17
    assert any(r.get("type") == "subagent" for p in SESSIONS for r in load(p)["requests"]), (
        "no shipped session has a sub-agent: the schema's subagent branch goes unchecked"
    )


@pytest.mark.parametrize("path", SESSIONS, ids=[p.name for p in SESSIONS])
def test_every_shipped_session_is_valid(path: Path) -> None:
    assert errors(load(path), SCHEMA) == []
    assert list(read_agentic(path))  # and the reader takes it


def _first_request(doc: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in doc["requests"] if r.get("type") != "subagent")


BREAKAGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "no block_size": lambda d: d.pop("block_size"),
    "requests not a list": lambda d: d.update(requests={}),
    "a request without in": lambda d: _first_request(d).pop("in"),
    "out negative": lambda d: _first_request(d).update(out=-1),
    "t a string": lambda d: _first_request(d).update(t="0"),
    "a hash id too large": lambda d: _first_request(d)["hash_ids"].append(1 << 64),
    "a hash id a float": lambda d: _first_request(d)["hash_ids"].append(1.5),
    "think_time negative": lambda d: _first_request(d).update(think_time=-2.0),
    "a request not an object": lambda d: d["requests"].append([1, 2]),
    "a sub-agent without t": lambda d: d["requests"].append({"type": "subagent", "requests": []}),
}


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_what_the_reader_refuses_the_schema_refuses(name: str, tmp_path: Path) -> None:
    doc = copy.deepcopy(load(SESSIONS[0]))
    BREAKAGES[name](doc)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError):
        list(read_agentic(path))
    assert errors(doc, SCHEMA), f"the schema lets through what the reader refuses: {name}"
