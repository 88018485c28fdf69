#!/usr/bin/env bash
# The quality gates (CI runs them first; run them before a commit): format and lint of the
# Python and the Rust, types of the package, the native module's stub against the module.
# Each gate is one line; append new ones (more paths, more tools) below.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
echo "==> ruff format --check"; ruff format --check python tests bench adapters
echo "==> ruff check"; ruff check python tests bench adapters
echo "==> mypy (python/)"; mypy
# the tests, benchmarks and adapter with the same settings; two runs, as each tree has a
# conftest (module names from the folders, so a nested conftest.py would not clash)
echo "==> mypy (tests/, bench/)"; MYPYPATH=tests:bench mypy --explicit-package-bases tests bench
echo "==> mypy (adapters/vllm/)"; MYPYPATH=adapters/vllm/src:bench mypy adapters/vllm/src adapters/vllm/tests
echo "==> mypy (adapters/sglang/)"; MYPYPATH=adapters/sglang/src:bench mypy adapters/sglang/src adapters/sglang/tests
echo "==> mypy (adapters/ray/src: the dev venv has Ray, not its Serve extras; the tests are left out)"; MYPYPATH=adapters/ray/src mypy adapters/ray/src
echo "==> stubtest (python/ttlpolicy/_native.pyi against the built module)"
python -m mypy.stubtest ttlpolicy._native --mypy-config-file pyproject.toml
echo "==> cargo fmt --check"; cargo fmt --all --check
echo "==> cargo clippy -D warnings"; cargo clippy --workspace --all-targets -- -D warnings
