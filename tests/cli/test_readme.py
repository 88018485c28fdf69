"""The README's Python snippet runs as a script and prints what its comments describe."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ttlpolicy

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_snippet_prints_its_values(tmp_path):
    (snippet,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    decision, solved, backend = proc.stdout.strip().splitlines()
    ttl_s, p_return, source = decision.split()
    assert float(ttl_s) >= 0 and 0 <= float(p_return) <= 1 and source
    assert solved.startswith("(") and solved.endswith(")")
    assert backend == f"{ttlpolicy.backend} {ttlpolicy.__version__}"
