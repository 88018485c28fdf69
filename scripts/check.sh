#!/usr/bin/env bash
# The quality gates (CI runs them first; run them before a commit): format and lint of the
# Python and the Rust, types of the package, the native module's stub against the module.
# Each gate is one line; append new ones (more paths, more tools) below.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
echo "==> ruff format --check"; ruff format --check python tests bench adapters
echo "==> ruff check"; ruff check python tests bench adapters
echo "==> mypy (python/)"; mypy
# the tests, benchmarks and adapter with the same settings; two runs, as each tree has a conftest
echo "==> mypy (tests/, bench/)"; MYPYPATH=tests:bench mypy tests bench
echo "==> mypy (adapters/vllm/)"; MYPYPATH=adapters/vllm/src mypy adapters/vllm/src adapters/vllm/tests
echo "==> stubtest (python/ttlpolicy/_native.pyi against the built module)"
python -m mypy.stubtest ttlpolicy._native --mypy-config-file pyproject.toml
echo "==> cargo fmt --check"; cargo fmt --all --check
echo "==> cargo clippy -D warnings"; cargo clippy --workspace --all-targets -- -D warnings
