"""bench/gpu/sglang_serve.sh and bench/gpu/sglang_hicache.sh (its HiCache run) refuse clearly
where there is no NVIDIA GPU, before they install or launch anything (the rest needs a GPU and
is not run here)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[3] / "bench" / "gpu"
SCRIPTS = ["sglang_serve.sh", "sglang_hicache.sh"]


def run(
    tmp_path: Path, fake_nvidia_smi: str | None, script: str
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if fake_nvidia_smi is not None:
        tool = bin_dir / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{fake_nvidia_smi}\n")
        tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", HOME=str(tmp_path / "home"))
    return subprocess.run(
        ["bash", str(GPU / script)], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "fake",
    [None, "echo 'No devices were found'; exit 6", "exit 9"],
    ids=["no-nvidia-smi", "no-device", "driver-error"],
)
@pytest.mark.parametrize("script", SCRIPTS)
def test_refuses_without_an_nvidia_gpu(tmp_path: Path, fake: str | None, script: str) -> None:
    if fake is None and Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has nvidia-smi in /usr/bin")
    proc = run(tmp_path, fake, script)
    assert proc.returncode == 2
    assert "needs an NVIDIA GPU" in proc.stderr
    assert not (tmp_path / "home").exists(), "nothing was installed before the check"
