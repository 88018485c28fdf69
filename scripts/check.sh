#!/usr/bin/env bash
# The quality gates (CI runs them first; run them before a commit): format and lint of the
# Python and the Rust, types of the package, the native module's stub against the module.
# Each gate is one line; append new ones (more paths, more tools) below.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
echo "==> ruff format --check"; ruff format --check python tests bench
echo "==> ruff check"; ruff check python tests bench
echo "==> mypy (python/)"; mypy
echo "==> stubtest (python/ttlpolicy/_native.pyi against the built module)"
python -m mypy.stubtest ttlpolicy._native --mypy-config-file pyproject.toml
echo "==> cargo fmt --check"; cargo fmt --all --check
echo "==> cargo clippy -D warnings"; cargo clippy --workspace --all-targets -- -D warnings
