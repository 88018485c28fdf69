#!/usr/bin/env python
"""Write a tiny random Llama (2 layers, hidden 64, head_dim 32, ~0.5 MB) and a byte-level BPE
tokenizer trained on a few sentences into FOLDER, made locally (no model hub): a model that
vLLM and SGLang serve on a CPU in seconds, for the quickstarts in docs/vllm.md and
docs/sglang.md.  Its answers are random tokens; it is there to exercise the engine, not to talk.

    python scripts/tiny-model.py build/tiny-llama     # needs torch, transformers, tokenizers

Run it with the engine's venv (they ship all three)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from vllm_engine import build_tiny_model


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    build_tiny_model(folder)
    print(f"tiny model written to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
