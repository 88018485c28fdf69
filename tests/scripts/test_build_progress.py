"""scripts/venv.sh's build_native: the Rust build says beforehand whether it is a first build
(minutes) or a rebuild and afterwards how long it took; it shows cargo's progress on a
terminal and stays quiet in CI logs. Run with a stand-in `maturin` that records its
arguments, so the test builds nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_native(tmp_path: Path, *, built_before: bool, terminal: bool) -> tuple[str, str]:
    """Runs build_native under a fake checkout; returns (stderr, maturin's arguments)."""
    root, bin_dir, venv = tmp_path / "root", tmp_path / "bin", tmp_path / "venv-x"
    root.mkdir()
    bin_dir.mkdir()
    args_file = tmp_path / "maturin-args"
    maturin = bin_dir / "maturin"
    maturin.write_text(f'#!/bin/sh\necho "$@" > {args_file}\necho "built" \n')
    maturin.chmod(0o755)
    if built_before:
        (root / "target/venvs/venv-x/release/.fingerprint/pyo3-0123abcd").mkdir(parents=True)
    # as env.sh runs it: strict mode (an empty array under set -u must not fail)
    script = f"set -euo pipefail; ROOT={root}; source {REPO}/scripts/venv.sh; build_native {venv}"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    if terminal:
        main_fd, sub_fd = os.openpty()
        subprocess.run(["bash", "-c", script], env=env, stderr=sub_fd, check=True, timeout=30)
        os.close(sub_fd)
        err = os.read(main_fd, 65536).decode()
        os.close(main_fd)
    else:
        err = subprocess.run(
            ["bash", "-c", script], env=env, stderr=subprocess.PIPE, text=True, check=True,
            timeout=30,
        ).stderr  # fmt: skip
    return err, args_file.read_text()


@pytest.mark.parametrize("built_before", [False, True])
def test_says_what_it_builds_and_how_long_it_took(tmp_path, built_before):
    err, args = build_native(tmp_path, built_before=built_before, terminal=False)
    lines = err.splitlines()
    assert len(lines) == 2, err  # CI logs: one line before, one after, nothing else
    if built_before:
        assert "only what changed" in lines[0] and "first build" not in lines[0]
    else:
        assert "first build" in lines[0] and "1-5 min" in lines[0]
    assert lines[1].startswith("==> ttlpolicy built in ") and lines[1].endswith(" s")
    assert "--quiet" in args.split() and "--release" in args.split()


def test_on_a_terminal_cargo_shows_its_progress(tmp_path):
    err, args = build_native(tmp_path, built_before=True, terminal=True)
    assert "--quiet" not in args.split()
    assert "==> ttlpolicy built in " in err
