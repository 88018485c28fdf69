"""``ttlpolicy.backend`` and the public names follow the native module, and
``TTLPOLICY_BACKEND=python`` forces the reference."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ttlpolicy as tp
from parity import SHARED

PUBLIC_CLASSES = [n for n in tp.__all__ if n not in SHARED]


def test_public_names_come_from_the_active_backend() -> None:
    if tp.backend == "rust":
        from ttlpolicy import _native

        assert all(getattr(tp, n) is getattr(_native, n) for n in PUBLIC_CLASSES)
    else:
        assert tp.backend == "python"
        assert all(
            getattr(tp, n).__module__.startswith("ttlpolicy.reference") for n in PUBLIC_CLASSES
        )


@pytest.mark.parametrize("forced", ["python", "bogus"])
def test_environment_selects_or_refuses(forced: str) -> None:
    env = {**os.environ, "TTLPOLICY_BACKEND": forced}
    code = "import ttlpolicy as tp; print(tp.backend, tp.TTLPolicy.__module__)"
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    if forced == "python":
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["python", "ttlpolicy.reference.policy"]
    else:
        assert r.returncode != 0 and "TTLPOLICY_BACKEND" in r.stderr


def test_a_native_build_of_other_sources_is_refused(tmp_path) -> None:
    """A checkout whose sources differ from what its native module was built from (an
    earlier commit's build left in place) refuses it at import, naming both digests; the
    reference still serves with TTLPOLICY_BACKEND=python."""
    import shutil
    from pathlib import Path

    from ttlpolicy import _native

    if not hasattr(_native, "SOURCE_DIGEST") or _native.SOURCE_DIGEST == "unknown":
        pytest.skip("no native module built from a checkout")  # (the reference-only run)
    repo = Path(tp.__file__).resolve().parents[2]
    for part in ("python/ttlpolicy", "rust/src", "bindings/src"):
        shutil.copytree(repo / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "bindings/build.rs", tmp_path / "bindings/build.rs")

    def run(backend: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TTLPOLICY_BACKEND": backend, "PYTHONPATH": str(tmp_path / "python")}
        code = "import ttlpolicy as tp; print(tp.backend, tp.__file__)"
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )

    same = run("")
    assert same.returncode == 0, same.stderr
    assert same.stdout.split()[0] == "rust" and str(tmp_path) in same.stdout
    core = tmp_path / "rust/src/lib.rs"
    core.write_text(core.read_text() + "\n// another commit\n")
    stale = run("")
    assert stale.returncode != 0
    assert "ImportError" in stale.stderr and _native.SOURCE_DIGEST[:16] in stale.stderr
    assert "TTLPOLICY_BACKEND=python" in stale.stderr
    reference = run("python")
    assert reference.returncode == 0 and reference.stdout.split()[0] == "python"
