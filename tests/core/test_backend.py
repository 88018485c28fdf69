"""``ttlpolicy.backend`` and the public names follow the native module, and
``TTLPOLICY_BACKEND=python`` forces the reference."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ttlpolicy as tp

PUBLIC_CLASSES = [n for n in tp.__all__ if n not in ("backend", "PolicyConfig")]


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
