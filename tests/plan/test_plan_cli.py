"""``ttlpolicy plan`` end to end on a shipped Mooncake excerpt: the JSON holds every point and
its front, a rerun resumes from the recorded points, bad input writes nothing."""

from __future__ import annotations

import json

import pytest

from trace_files import DATA
from ttlpolicy.cli import main
from ttlpolicy.plan.front import as_min, dominates

AZURE = "AzureLLMInferenceTrace_conv_head1000.csv.gz"  # no prefixes: nothing to tier
SMALL_OPTIONS = [
    "--dram-gb", "64:512", "--ssd-gb", "512:2048",
    "--ttls", "60", "--groupings", "reuse", "--baseline", "dram=256", "--workers", "1",
    "--no-progress",
]  # fmt: skip


@pytest.fixture
def small(mooncake_head) -> list[str]:
    """A small plan of the Mooncake head: two DRAM and two SSD sizes, one TTL, one grouping."""
    return ["--trace", str(mooncake_head), *SMALL_OPTIONS]


def test_plan_writes_every_point_and_the_front(tmp_path, capsys, small):
    out = tmp_path / "plan.json"
    assert main(["plan", *small, "--exhaustive", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    pts = doc["points"]
    assert doc["evaluations"] == len(pts) == doc["meta"]["grid_points"]
    keys = {"cost_usd_per_h", "throughput_tok_s", "ttft_mean_s", "ttft_p99_s", "usd_per_m_tok"}
    assert all(
        keys <= p.keys() and {"dram_gb", "ssd_gb", "policy"} <= p["config"].keys() for p in pts
    )
    objs = [as_min(p) for p in pts]
    for i in doc["front"]:
        assert not any(dominates(o, objs[i]) for o in objs)
    for j in set(range(len(pts))) - set(doc["front"]):
        assert any(dominates(objs[i], objs[j]) or objs[i] == objs[j] for i in doc["front"])
    base = pts[doc["baseline"]]["config"]
    assert (base["dram_gb"], base["ssd_gb"], base["policy"]) == (256, 0, "lru")
    text = capsys.readouterr().out
    assert "Pareto front" in text and "best mean TTFT" in text and "baseline" in text
    # more capacity never makes a hit less likely under LRU
    lru = {
        (p["config"]["dram_gb"], p["config"]["ssd_gb"]): p
        for p in pts
        if p["config"]["policy"] == "lru"
    }
    assert lru[(512, 2048)]["hit_rate"] >= lru[(0, 0)]["hit_rate"]


def test_a_rerun_resumes_from_the_recorded_points(tmp_path, capsys, monkeypatch, small):
    # A cache of its own: the suite's shared one may hold these points from an earlier test.
    monkeypatch.setenv("TTLPOLICY_CACHE", str(tmp_path / "cache"))
    assert main(["plan", *small, "--json", str(tmp_path / "a.json")]) == 0
    first = capsys.readouterr().err
    assert main(["plan", *small, "--json", str(tmp_path / "b.json")]) == 0
    second = capsys.readouterr().err
    assert "(0 simulated now" in second and "(0 simulated now" not in first
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert a["points"] == b["points"]


def test_other_code_does_not_reuse_the_record(tmp_path, capsys, monkeypatch, small):
    # The record's figures are the code's: after an upgrade (another code digest) the same
    # plan is simulated again, not read back.
    import ttlpolicy.plan.results as results

    monkeypatch.setenv("TTLPOLICY_CACHE", str(tmp_path / "cache"))
    assert main(["plan", *small]) == 0
    capsys.readouterr()
    monkeypatch.setattr(results, "code_digest", lambda: "another version of the code")
    assert main(["plan", *small]) == 0
    assert "(0 simulated now" not in capsys.readouterr().err


def test_the_code_digest_follows_every_python_file_and_the_native_module(tmp_path):
    from ttlpolicy.plan.results import code_digest

    pkg = tmp_path / "pkg"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "sim" / "engine.py").write_text("RULE = 1\n")
    (pkg / "_native.abi3.so").write_bytes(b"\x7fELF v1")
    (pkg / "notes.txt").write_text("not code")
    first = code_digest.__wrapped__(pkg)
    (pkg / "notes.txt").write_text("still not code")
    assert code_digest.__wrapped__(pkg) == first
    (pkg / "sim" / "engine.py").write_text("RULE = 2\n")
    second = code_digest.__wrapped__(pkg)
    assert second != first
    (pkg / "_native.abi3.so").write_bytes(b"\x7fELF v2")
    assert code_digest.__wrapped__(pkg) not in (first, second)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "tpu-v9"], "--gpu: unknown GPU 'tpu-v9'"),
        (["--model", "gpt-17"], "--model: unknown model 'gpt-17'"),
        (["--dram-gb", "0:512"], "--dram-gb must be START:MAX"),
        (["--ssd-gb=-512:1024"], "--ssd-gb"),
        (["--baseline", "dram=-1"], "--baseline dram"),
        (["--baseline", "hbm=1"], "--baseline"),
        (["--ttls", "abc"], "--ttls"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--hbm-fraction", "0"], "--hbm-fraction"),
        (["--trace", str(DATA / "azure" / AZURE)], "no request carries block hashes"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(tmp_path, capsys, args, message, small):
    out = tmp_path / "plan.json"
    assert main(["plan", *small, "--json", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_bad_price_file_names_the_field_and_writes_nothing(tmp_path, capsys, small):
    from ttlpolicy.plan.prices import default_prices_path

    doc = json.loads(default_prices_path().read_text())
    del doc["tiers"]["dram"]["usd_per_gb_h"]
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(doc))
    out = tmp_path / "plan.json"
    assert main(["plan", *small, "--prices", str(prices), "--json", str(out)]) == 2
    assert "tiers.dram.usd_per_gb_h: missing" in capsys.readouterr().err
    assert not out.exists()


def test_plot_is_written(tmp_path, small):
    pytest.importorskip("matplotlib")
    out = tmp_path / "front.png"
    assert main(["plan", *small, "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
