"""The README's Python snippet runs as a script and prints exactly the output the README shows
beneath it (the backend line: whichever backend this run has)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ttlpolicy

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_snippet_prints_what_the_readme_says(tmp_path):
    text = README.read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (shown,) = re.findall(r"```python\n.*?```\n\nprints\n\n```\n(.*?)```", text, re.S)
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    *decisions, backend = proc.stdout.splitlines()
    *shown_decisions, shown_backend = shown.splitlines()
    assert decisions == shown_decisions
    assert backend == ttlpolicy.backend and shown_backend in ("rust", "python")
