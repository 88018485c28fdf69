"""The guide's account of the demo (docs/simulate.md, "What the demo shows") matches what the
demo prints (scripts/demo.sh runs ``ttlpolicy compare --concurrency 4 --sweep``).  When the
simulator changes, this fails until the guide's sentence is rerun."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from ttlpolicy.cli import main
from ttlpolicy.cli.compare import DEFAULT_POLICIES, verdict

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "simulate.md"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[dict[tuple[str, int], float], str]:
    """(mean completion time by (policy, load), what the demo printed on stdout)."""
    demo_sh = (ROOT / "scripts" / "demo.sh").read_text()
    (args,) = re.findall(r"^ttlpolicy compare (.*) \"\$@\"$", demo_sh, re.M)
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["compare", *args.split(), "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    return {(r["policy"], r["load"]): r["summary"]["jct_mean_s"] for r in results}, (
        printed.getvalue()
    )


@pytest.fixture(scope="module")
def demo(demo_run) -> dict[tuple[str, int], float]:
    return demo_run[0]


def test_the_demo_ends_with_a_verdict_that_its_figures_bear_out(demo_run) -> None:
    jct, printed = demo_run
    last = printed.strip().splitlines()[-1]
    assert last.startswith("verdict: on mean completion time, ttlpolicy finished the programs")
    loads = sorted({load for _, load in jct})
    ties = [x for x in loads if abs(jct["vllm", x] / jct["ttlpolicy", x] - 1) <= 0.002]
    if ties:
        named = [str(x) for x in ties]
        listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
        assert f"(within 0.2 %) at {listed} programs in flight" in last
    for pct, load in re.findall(r"([\d.]+) % sooner(?: than stock vLLM)? at (\d+)", last):
        gain = 100 * (jct["vllm", int(load)] / jct["ttlpolicy", int(load)] - 1)
        assert float(pct) == round(gain, 1)
    said = {int(x) for x in re.findall(r" at (\d+)", last)} | set(ties)
    assert said == set(loads)  # every load is accounted for
    assert "pinned blk·s: KV blocks kept for returning programs" in printed  # the legend


def test_the_verdict_says_later_and_switches_to_times_for_large_gaps() -> None:
    def run(policy: str, load: int, jct_s: float) -> dict:
        return {"policy": policy, "load": load, "summary": {"jct_mean_s": jct_s}}

    results = [run("vllm", 1, 100.0), run("ttlpolicy", 1, 104.0)]
    results += [run("vllm", 2, 300.0), run("ttlpolicy", 2, 100.0)]
    assert verdict(results, "rate (programs/s)") == (
        "verdict: on mean completion time, ttlpolicy finished the programs "
        "4.0 % later than stock vLLM at 1, 3.00× sooner at 2 programs/s"
    )
    assert verdict([*results[:2], run("continuum", 2, 1.0)], "rate (programs/s)") is None
    assert verdict([run("vllm", 1, 1.0)], "rate (programs/s)") is None


def test_the_guide_lists_exactly_the_policies_the_demo_runs(demo) -> None:
    paragraph = GUIDE.read_text().split("`bash scripts/demo.sh` runs")[1].split("\n\n")[0]
    listed = paragraph.split("under every policy")[1].split(") and prints")[0]
    named = set(re.findall(r"`([a-z-]+)`", listed))
    assert named == set(DEFAULT_POLICIES.split(",")) == {p for p, _ in demo}


def test_the_guide_figures_are_what_the_demo_prints(demo) -> None:
    text = " ".join(GUIDE.read_text().split())
    loads = sorted({load for _, load in demo})
    assert loads == [2, 4, 8, 16]  # "at 2, 4, 8 and 16 programs in flight"
    for load in (2, 4):  # "within 0.2 % of each other"
        means = [m for (_, ld), m in demo.items() if ld == load]
        assert max(means) <= 1.002 * min(means)
    m = re.search(
        r"`vllm-offload`: mean ([\d,.]+) vs ([\d,.]+) s and ([\d,.]+) vs ([\d,.]+) s", text
    )
    assert m, "the guide's demo figures are gone"
    quoted = [float(x.replace(",", "")) for x in m.groups()]
    printed = [
        demo["vllm-offload", 8],
        demo["vllm", 8],
        demo["vllm-offload", 16],
        demo["vllm", 16],
    ]
    assert quoted == [round(x, 1) for x in printed]
    # "GPU-only `ttlpolicy` finishes X % (8 programs) and Y % (16) sooner than stock vLLM"
    # (at 2 and 4 every policy is within 0.2 %, above)
    m = re.search(
        r"GPU-only `ttlpolicy` finishes ([\d.]+) % \(8 programs\) and ([\d.]+) % \(16\) sooner",
        text,
    )
    assert m, "the guide's ttlpolicy figures are gone"
    for load, quoted_pct in zip((8, 16), m.groups(), strict=True):
        gain = 100 * (1 - demo["ttlpolicy", load] / demo["vllm", load])
        assert round(gain, 1) == float(quoted_pct)
