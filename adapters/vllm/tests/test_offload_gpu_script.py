"""bench/gpu/vllm_offload.sh refuses clearly without an NVIDIA GPU (tested up to that check:
the rest needs a GPU).  A fake ``nvidia-smi`` that lists no GPU, and none at all, both stop it
before it touches Python; one that lists a GPU lets it past the check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu" / "vllm_offload.sh"


def run(tmp_path: Path, nvidia_smi: str | None) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if nvidia_smi is not None:
        tool = bin_dir / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        tool.chmod(0o755)
    # a python that only says it was reached: the check is all that runs here
    py = bin_dir / "fake-python"
    py.write_text("#!/bin/sh\necho reached-python\nexit 0\n")
    py.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(py), "HOME": os.environ["HOME"]}
    return subprocess.run(
        ["bash", str(SCRIPT), "3"], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("nvidia_smi", [None, "exit 9", "echo 'No devices were found'"])
def test_refuses_without_an_nvidia_gpu(tmp_path, nvidia_smi):
    done = run(tmp_path, nvidia_smi)
    assert done.returncode == 2
    assert "refusing to run: no NVIDIA GPU" in done.stderr
    assert "reached-python" not in done.stdout


def test_goes_past_the_check_with_a_gpu(tmp_path):
    done = run(tmp_path, "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("reached-python") == 3  # one run per policy
