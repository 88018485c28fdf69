"""``ttlpolicy groups``: a small hand-checked trace, the shipped sessions, and bad input."""

from __future__ import annotations

import json
import re

import pytest

from ttlpolicy.cli import main
from ttlpolicy.cli.groups import Outcome, frontier_block_hours
from ttlpolicy.traces import sample_dir


def _policy_row(text: str, tier: str, policy: str) -> list[str]:
    section = text.split(f"tier {tier}:")[1].split("\n\n")[0]
    (line,) = [ln for ln in section.splitlines() if ln.startswith(policy)]
    return line[len(policy) :].split()


def test_hand_checked_trace(tmp_path, capsys):
    # Conversation A (blocks 1,2,3) comes back after 10 s; B (1,4) never does.  Block 1 is
    # shared.  Unbounded LRU: hits = 1 (B's block 1) + 3 (A again) out of 3 + 2 + 3 blocks.
    lines = [
        {"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]},
        {"timestamp": 1000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 4]},
        {"timestamp": 10000, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rc = main(
        [
            "groups",
            "--trace",
            str(path),
            "--no-progress",
            "--capacity-blocks",
            "100",
            "--tier",
            "dram=0.0036",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "requests 3, blocks requested 8, distinct blocks 4" in out
    ttl, hit_rate, block_h, _ = _policy_row(out, "dram", "no TTL (LRU)")
    assert ttl == "inf" and float(hit_rate) == pytest.approx(4 / 8, abs=1e-4)
    # 4 blocks held from creation to the end (10 s): blocks 1-3 for 10 s, block 4 for 9 s.
    assert float(block_h) == pytest.approx(39 / 3600, rel=1e-3)
    # Group (1,2) is reused after 10 s, well under the DRAM break-even: it keeps its blocks;
    # group (1,4) is never reused and gets TTL 0.
    _, hit_rate, _, _ = _policy_row(out, "dram", "group TTLs")
    assert float(hit_rate) == pytest.approx(4 / 8, abs=1e-4)
    assert re.search(r"^1,4 .* 0\s*$", out, re.M)


def test_shipped_sessions(capsys):
    rc = main(
        [
            "groups",
            "--trace",
            str(sample_dir()),
            "--no-progress",
            "--max-sessions",
            "3",
            "--max-requests",
            "40",
            "--top",
            "3",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "requests 40," in out
    for tier in ("dram", "ssd"):
        rows = {
            p: _policy_row(out, tier, p) for p in ("no TTL (LRU)", "group TTLs", "ROI global TTL")
        }
        for _ttl, hit_rate, block_h, _ in rows.values():
            assert 0.0 <= float(hit_rate) <= 1.0 and float(block_h) >= 0.0
        # With the same capacity, a TTL can only drop blocks earlier than LRU would.
        lru_hours = float(rows["no TTL (LRU)"][2])
        assert float(rows["group TTLs"][2]) <= lru_hours + 1e-6


def test_frontier_interpolates_between_sweep_points():
    pts = [
        Outcome("g", str(t), hits, 10, hours)
        for t, hits, hours in [(0, 1, 0.0), (10, 5, 4.0), (20, 9, 20.0)]
    ]
    assert frontier_block_hours(pts, 0.5) == pytest.approx(4.0)
    assert frontier_block_hours(pts, 0.7) == pytest.approx(12.0)
    assert frontier_block_hours(pts, 0.95) is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tier", "dram"], "NAME=USD_PER_GIB_HOUR"),
        (["--tier", "dram=cheap"], "price must be a number"),
        (["--tier", "dram=-1"], ">= 0"),
        (["--max-ttl-s", "nan"], "--max-ttl-s"),
        (["--group-depth", "0"], "--group-depth"),
        (["--capacity-blocks", "0"], "--capacity-blocks"),
        (["--max-sessions", "0"], "--max-sessions"),
    ],
)
def test_bad_options_give_one_clear_line(tmp_path, capsys, extra, message):
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}) + "\n"
    )
    assert main(["groups", "--trace", str(path), "--no-progress", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_trace_without_hashes_is_refused(tmp_path, capsys):
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,3,4\n")
    assert main(["groups", "--trace", str(path), "--no-progress"]) == 2
    assert "no request carries block hashes" in capsys.readouterr().err


def _block_hour_price(text: str, tier: str) -> float:
    (m,) = re.findall(rf"^tier {tier}: \$(\S+) per block-hour", text, re.M)
    return float(m)


def test_default_prices_come_from_the_price_table(tmp_path, capsys):
    """``groups`` and ``plan`` price tiers from one table: a table with DRAM at twice the
    shipped price doubles ``groups``' DRAM block-hour price and leaves SSD's as it was."""
    from ttlpolicy.plan.prices import default_prices_path

    base = ["groups", "--no-progress", "--max-sessions", "1", "--top", "0"]
    assert main(base) == 0
    shipped = capsys.readouterr().out
    doc = json.loads(default_prices_path().read_text())
    doc["tiers"]["dram"]["usd_per_gb_h"] *= 2
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(doc))
    assert main([*base, "--prices", str(table)]) == 0
    dearer = capsys.readouterr().out
    assert _block_hour_price(dearer, "dram") == pytest.approx(
        2 * _block_hour_price(shipped, "dram"), rel=1e-2
    )
    assert _block_hour_price(dearer, "ssd") == _block_hour_price(shipped, "ssd")


def test_a_bad_price_table_names_the_field(tmp_path, capsys):
    from ttlpolicy.plan.prices import default_prices_path

    doc = json.loads(default_prices_path().read_text())
    del doc["tiers"]["ssd"]["usd_per_gb_h"]
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(doc))
    assert main(["groups", "--no-progress", "--prices", str(table)]) == 2
    assert "tiers.ssd.usd_per_gb_h: missing" in capsys.readouterr().err
