"""The guide's account of the demo (docs/simulate.md, "What the demo shows") matches what the
demo prints (scripts/demo.sh runs ``ttlpolicy compare --concurrency 4 --sweep``).  When the
simulator changes, this fails until the guide's sentence is rerun."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ttlpolicy.cli import main
from ttlpolicy.cli.compare import DEFAULT_POLICIES

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "simulate.md"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[tuple[str, int], float]:
    demo_sh = (ROOT / "scripts" / "demo.sh").read_text()
    (args,) = re.findall(r"^ttlpolicy compare (.*) \"\$@\"$", demo_sh, re.M)
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    assert main(["compare", *args.split(), "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    return {(r["policy"], r["load"]): r["summary"]["jct_mean_s"] for r in results}


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
