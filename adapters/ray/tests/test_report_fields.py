"""``ReplicaReport``: one declaration of a replica report's layout for the writer
(``routing_stats``) and the reader (the router): a report reads back field by field as it
was made, a missing entry or field reads as None, and every key the router reads is a field."""

from __future__ import annotations

import ast
from pathlib import Path

from ttlpolicy_ray import REPORT_KEY, routing_stats
from ttlpolicy_ray.report import REPORT_FIELDS, REPORT_VERSION, ReplicaReport

from ttlpolicy.ids import program_key, tenant_key

ROUTER = Path(__file__).resolve().parents[1] / "src" / "ttlpolicy_ray" / "router.py"


def test_a_report_reads_back_as_made() -> None:
    stats = routing_stats(
        seq=7, free_blocks=10, total_blocks=24, queue_len=1, queued_tokens=64,
        working_set_blocks=8, cached_fraction=0.5, block_size=32, return_queue_len=0,
        return_queued_tokens=0, pins=[("p", 3.0, 4), ("q", 0.0, 2)], evicted=[("r", 1)],
        at=1000.0, max_pins=1,
    )  # fmt: skip
    report = ReplicaReport.read(stats)
    assert report is not None
    assert (report.v, report.seq, report.at, report.block_size) == (REPORT_VERSION, 7, 1000.0, 32)
    assert (report.pins, report.pins_left_out, report.evicted) == ([["p", 3.0, 4]], 0, [["r", 1]])
    assert (report.return_queue_len, report.cached_fraction) == (0, 0.5)
    assert report.entry() == stats[REPORT_KEY]
    assert set(stats[REPORT_KEY]) == set(REPORT_FIELDS)


def test_what_is_missing_reads_as_none() -> None:
    assert ReplicaReport.read(None) is None
    assert ReplicaReport.read({"other": {}}) is None
    assert ReplicaReport.read({REPORT_KEY: [1]}) is None
    report = ReplicaReport.read({REPORT_KEY: {"seq": 3, "not_a_field": 1}})
    assert report == ReplicaReport(seq=3)
    # a report without the optional return queue leaves it out when sent again
    stats = routing_stats(
        seq=1, free_blocks=1, total_blocks=2, queue_len=0, queued_tokens=0,
        working_set_blocks=0, cached_fraction=0.0, block_size=16, at=5.0,
    )  # fmt: skip
    assert "return_queue_len" not in stats[REPORT_KEY]
    assert ReplicaReport.read(stats).entry() == stats[REPORT_KEY]  # type: ignore[union-attr]


def test_every_key_the_router_reads_is_a_field() -> None:
    """The router reads a report as ``rep = ReplicaReport.read(...)``, then ``rep.<field>``:
    each attribute it reads is a field (mypy checks it too; this holds without it)."""
    tree = ast.parse(ROUTER.read_text(encoding="utf-8"))
    read = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "rep"
    }
    assert read, "the router reads its reports some other way now: check this test"
    assert read <= set(REPORT_FIELDS), read - set(REPORT_FIELDS)


def test_the_router_reads_no_key_as_a_dicts() -> None:
    """``ReplicaReport.read`` is the router's one reader of a report's entry."""
    text = ROUTER.read_text(encoding="utf-8")
    assert "ReplicaReport.read(" in text
    assert ".get(REPORT_KEY)" not in text and "rep.get(" not in text


def test_a_tenant_with_many_entries_does_not_push_anothers_out() -> None:
    """Cut at the report's cap, each tenant's pins and evictions are taken in turn: a tenant
    with thousands of long pins (or small evictions) leaves room for another's."""
    crowd, other = tenant_key("crowd"), tenant_key("other")
    pins = [(program_key(crowd, f"c{i}"), 100.0 + i, 1) for i in range(50)]
    pins.append((program_key(other, "o"), 10.0, 1))  # shorter-lived than every crowd pin
    evicted = [(program_key(crowd, f"c{i}"), 1) for i in range(50)]
    evicted.append((program_key(other, "o"), 9))  # held more than every crowd eviction
    stats = routing_stats(
        seq=1, free_blocks=1, total_blocks=2, queue_len=0, queued_tokens=0,
        working_set_blocks=0, cached_fraction=0.0, block_size=16, at=5.0,
        pins=pins, max_pins=4, evicted=evicted, max_evicted=4,
    )  # fmt: skip
    report = ReplicaReport.read(stats)
    assert report is not None and report.pins is not None and report.evicted is not None
    assert [p[0] for p in report.pins] == [pins[49][0], pins[50][0], pins[48][0], pins[47][0]]
    assert program_key(other, "o") in [e[0] for e in report.evicted]
    assert (report.pins_left_out, report.evicted_left_out) == (47, 47)
