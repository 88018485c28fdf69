"""``ttlpolicy compare --instances N --router R``: every policy under every router listed,
the JSON naming the router and each instance's figures; one instance behind a router gives
the lone engine's figures; a bad router, or a router on a request trace, is refused by name."""

from __future__ import annotations

import json

from trace_files import DATA
from ttlpolicy.cli import main

RUN = ["compare", "--policies", "vllm,ttlpolicy", "--rate", "0.5"]


def test_every_policy_under_every_router_with_per_instance_figures(tmp_path):
    out = tmp_path / "c.json"
    args = [*RUN, "--instances", "3", "--router", "round-robin,ttlpolicy", "--json", str(out)]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["instances"] == 3
    runs = [(r["policy"], r["router"]) for r in doc["results"]]
    assert sorted(runs) == sorted(
        (p, r) for p in ("vllm", "ttlpolicy") for r in ("round-robin", "ttlpolicy")
    )
    for r in doc["results"]:
        assert len(r["per_instance"]) == 3
        calls = sum(x["calls"] for x in r["per_instance"])
        assert calls > 0 and r["summary"]["programs"] > 0


def test_one_instance_behind_a_router_is_the_lone_engine(tmp_path):
    lone, one = tmp_path / "lone.json", tmp_path / "one.json"
    assert main([*RUN, "--json", str(lone)]) == 0
    assert main([*RUN, "--instances", "1", "--router", "prefix", "--json", str(one)]) == 0
    a = json.loads(lone.read_text())["results"]
    b = json.loads(one.read_text())["results"]
    assert [r["summary"] for r in a] == [r["summary"] for r in b]


def test_a_bad_router_is_refused_by_name(capsys):
    assert main([*RUN, "--instances", "2", "--router", "nearest"]) == 2
    assert "--router" in capsys.readouterr().err
    trace = DATA / "mooncake" / "conversation_trace_head2000.jsonl.gz"
    assert main(["compare", "--trace", str(trace), "--instances", "2"]) == 2
    assert "--instances" in capsys.readouterr().err
