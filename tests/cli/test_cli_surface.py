"""What the commands tell a newcomer (issue 33): a trace without prefix information or an
overloaded engine is said so; outputs are checked writable before any work; TTLs print
rounded; a first load of a trace shows progress; the plan figure names what it shows."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ttlpolicy.cli import main
from ttlpolicy.cli import plan as plan_cli
from ttlpolicy.cli.groups import ttl_text

DATA = Path(__file__).resolve().parents[1] / "data"
MOONCAKE = DATA / "mooncake" / "conversation_trace_head2000.jsonl.gz"
AZURE = DATA / "azure" / "AzureLLMInferenceTrace_conv_head1000.csv.gz"
SESSIONS = DATA / "sessions"
#: a plan of a handful of points (seconds): LRU only, two DRAM sizes, one SSD size
SMALL_PLAN = [
    "--dram-gb", "256:512", "--ssd-gb", "2048:2048", "--ttls", "", "--groupings", "",
    "--workers", "1", "--no-cache", "--no-progress",
]  # fmt: skip


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in: a read-only one, or for root (whom permission bits
    do not stop) sysfs, which refuses new files to everyone."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    return folder if os.geteuid() != 0 else Path("/sys")


@pytest.mark.parametrize("command", ["compare", "plan"])
@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_unwritable_output_is_refused_before_any_work(tmp_path, capsys, command, flag):
    out = unwritable_folder(tmp_path) / "out.file"
    if not out.parent.is_dir():
        pytest.skip("no read-only folder on this machine")
    argv = [command, "--trace", str(tmp_path / "never-read.jsonl"), flag, str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    # refused by the argument check (the trace, which does not exist, is never looked at)
    assert f"argument {flag}: cannot write {str(out)!r}: folder {str(out.parent)!r}:" in err
    assert "no such trace" not in err and "Traceback" not in err


def test_plan_refuses_an_output_folder_that_does_not_exist_by_the_option(tmp_path, capsys):
    out = tmp_path / "no" / "such" / "plan.json"
    assert main(["plan", "--json", str(out)]) == 2
    assert "argument --json: cannot write" in capsys.readouterr().err


def test_compare_warns_that_azure_has_no_prefix_information(capsys):
    assert main(["compare", "--trace", str(AZURE), "--policies", "vllm,ttlpolicy"]) == 0
    captured = capsys.readouterr()
    assert "carries no prefix information" in captured.err
    hit_rates = re.findall(r"^(?:vllm|ttlpolicy)\s.*\s(\d\.\d{3})\s", captured.out, re.M)
    assert hit_rates == ["0.000", "0.000"]  # what the warning explains


def test_compare_says_a_request_trace_with_hashes_is_replayed_without_reuse(capsys):
    argv = ["compare", "--trace", str(MOONCAKE), "--policies", "vllm", "--rate", "0.05"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "prefix reuse between them is not simulated" in err
    assert "no prefix information" not in err


def test_a_first_load_shows_progress_and_a_cached_one_does_not(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TTLPOLICY_CACHE", str(tmp_path / "cache"))
    argv = ["compare", "--trace", str(SESSIONS), "--policies", "vllm", "--concurrency", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().err
    assert f"loading {SESSIONS}" in first and f"reading {SESSIONS}: session 1," in first
    assert main(argv) == 0
    second = capsys.readouterr().err
    assert f"loading {SESSIONS}" in second and "reading" not in second


def test_plan_warns_when_no_configuration_keeps_up_with_the_trace(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--trace", str(MOONCAKE), *SMALL_PLAN, "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: the simulated engine is overloaded" in err
    doc = json.loads(out.read_text())
    best = max(p["throughput_tok_s"] for p in doc["points"])
    assert f"at best it serves {best:.3g} output tokens/s" in err


def test_plan_does_not_warn_where_the_engine_keeps_up(capsys):
    assert main(["plan", *SMALL_PLAN]) == 0  # the shipped sessions: ~4 tok/s offered
    assert "overloaded" not in capsys.readouterr().err


def test_the_overload_rule_compares_the_best_throughput_with_the_offered_load():
    import numpy as np

    class Trace:  # 1,000 output tokens over 10 s of arrivals: 100 tok/s offered
        arrival_s = np.array([0.0, 10.0])
        output_tokens = np.array([500, 500])

    assert plan_cli.overload_warning(Trace(), [{"throughput_tok_s": 91.0}]) is None
    assert "serves 89 output tokens/s of the 100" in (
        plan_cli.overload_warning(Trace(), [{"throughput_tok_s": 89.0}]) or ""
    )


@pytest.mark.parametrize(
    "ttl_s, shown",
    [(3.001, "3.0"), (71.999, "72"), (266.999, "267"), (0.25, "0.2"), (0.0, "0")],
)
def test_group_ttls_print_rounded(ttl_s, shown):
    assert ttl_text(ttl_s) == shown
    assert ttl_text(float("inf")) == "inf"


def test_groups_prints_no_ttl_with_solver_noise(capsys):
    assert main(["groups", "--trace", str(MOONCAKE), "--top", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = out.split("TTL ssd s\n")[1].split("\n\n")[0].splitlines()
    assert len(table) == 8
    for row in table:
        for ttl in row.split()[-2:]:
            assert re.fullmatch(r"\d+|\d\.\d|inf", ttl), row  # no 71.999, no 3.001


def test_the_plan_figure_names_its_trace_and_model_and_labels_the_front(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    png, json_out = tmp_path / "plan.png", tmp_path / "plan.json"
    drawn = []
    real_figure = plan_cli.figure

    def recording_figure(*args):
        drawn.append(real_figure(*args))
        return drawn[-1]

    monkeypatch.setattr(plan_cli, "figure", recording_figure)
    argv = ["plan", "--trace", str(MOONCAKE), *SMALL_PLAN, "--json", str(json_out)]
    assert main([*argv, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(json_out.read_text())
    (fig,) = drawn
    title = fig._suptitle.get_text()
    for part in (MOONCAKE.name, "llama-3.1-8b", "h100-80g", "provisioned billing", "D<DRAM GB>"):
        assert part in title
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["evaluated configurations", "Pareto front", "baseline"]
        notes = {t.get_text() for t in ax.texts}
        assert notes == {plan_cli.tier_label(doc["points"][i]["config"]) for i in doc["front"]}
        assert ax.get_xlabel() == "$/h (provisioned)"
