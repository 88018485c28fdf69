"""`ttlpolicy compare --sweep --plot` writes a completion-time-vs-load figure."""

from __future__ import annotations

import json

import pytest

from ttlpolicy.cli import main

pytest.importorskip("matplotlib")


def test_sweep_plot_is_a_png_with_one_point_per_load(tmp_path, capsys) -> None:
    png, out = tmp_path / "sweep.png", tmp_path / "sweep.json"
    argv = ["compare", "--policies", "vllm,ttlpolicy", "--concurrency", "2", "--sweep"]
    rc = main([*argv, "--plot", str(png), "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loads = {(r["policy"], r["load"]) for r in json.loads(out.read_text())["results"]}
    # the sweep visits several load points for every policy
    assert len({load for _, load in loads}) >= 3
    assert {p for p, _ in loads} == {"vllm", "ttlpolicy"}


def test_tied_policies_stay_distinguishable_and_the_plot_has_a_title() -> None:
    from ttlpolicy.cli.compare import figure

    # seven policies with the same numbers: every curve is drawn on the same points
    results = [
        {"policy": pol, "load": load, "summary": {"jct_mean_s": 100.0 + load}}
        for pol in ("a", "b", "c", "d", "e", "f", "g")
        for load in (2, 4, 8, 16)
    ]
    fig = figure(results, "concurrency (programs)", "7 programs from a test")
    (ax,) = fig.axes
    assert ax.get_title() == "7 programs from a test"
    lines = ax.get_lines()
    assert len(lines) == 7
    looks = {(ln.get_marker(), ln.get_linestyle(), ln.get_markersize()) for ln in lines}
    assert len(looks) == 7  # no two curves look the same
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8", "16"]


def test_the_sweep_plot_starts_at_zero_so_a_small_gap_looks_small() -> None:
    from ttlpolicy.cli.compare import figure

    # two policies 0.9 % apart, far from 0: an axis fitted to the data would start near 1,000
    results = [
        {"policy": pol, "load": load, "summary": {"jct_mean_s": base * (1 + load / 100)}}
        for pol, base in (("a", 1000.0), ("b", 1009.0))
        for load in (2, 4, 8)
    ]
    (ax,) = figure(results, "concurrency (programs)", "t").axes
    bottom, top = ax.get_ylim()
    assert bottom == 0
    assert top >= 1009.0 * 1.08
