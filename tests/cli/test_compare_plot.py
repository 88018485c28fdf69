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
