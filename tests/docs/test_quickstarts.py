"""The engine guides' install lines are the recipes the test suite's venvs are built with
(scripts/*-env.sh: the same lock file, the same engine pin), and no document tells a reader to
``pip install`` a ttlpolicy package by name: none is on PyPI, they install from a clone
(issue 47).  The vLLM quickstart's other steps run in adapters/vllm/tests/test_quickstart.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs import DOCS, ROOT, fenced_blocks

#: guide → (its env script, the variable holding the engine's pin there, or None, the lock)
RECIPES = {
    "vllm.md": ("vllm-env.sh", "VLLM_PIN", "requirements/vllm.txt"),
    "sglang.md": ("sglang-env.sh", "SGLANG_PIN", "requirements/sglang.txt"),
    "ray.md": ("ray-env.sh", None, "requirements/ray.txt"),
}
OUR_PACKAGES = re.compile(
    r"pip install [^\n#`]*(?<![\w./-])ttlpolicy(-vllm|-sglang|-ray)?(?![\w./-])"
)


def shell(doc: Path) -> str:
    return "\n".join(
        body for lang, body in fenced_blocks(doc.read_text()) if lang in ("bash", "sh")
    )


@pytest.mark.parametrize("guide", list(RECIPES))
def test_a_guide_installs_what_the_tests_run_on(guide: str) -> None:
    script, pin_var, lock = RECIPES[guide]
    commands = shell(ROOT / "docs" / guide)
    env_sh = (ROOT / "scripts" / script).read_text()
    assert f"-r {lock}" in commands
    assert f'"$ROOT/{lock}"' in env_sh
    if pin_var:
        (pin,) = re.findall(rf'^{pin_var}="([^"]+)"$', env_sh, re.M)
        assert f"pip install --no-deps {pin}" in commands, pin
    adapter = "adapters/" + guide.removesuffix(".md")
    assert re.search(rf"pip install \. (&& pip install --no-deps )?{adapter}\b", commands)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_no_document_installs_a_ttlpolicy_package_by_name(doc: Path) -> None:
    text = doc.read_text()
    by_name = [m.group(0) for m in OUR_PACKAGES.finditer(text)]
    assert not by_name, f"{doc.relative_to(ROOT)}: not on PyPI, install from a clone: {by_name}"


def test_the_by_name_check_catches_the_old_lines() -> None:
    assert OUR_PACKAGES.search("pip install ttlpolicy ttlpolicy-vllm   # next to vllm")
    assert OUR_PACKAGES.search("pip install 'ttlpolicy-sglang'".replace("'", ""))
    assert not OUR_PACKAGES.search("pip install . adapters/vllm")
    assert not OUR_PACKAGES.search("pip install -e ./ttlpolicy_vllm")
