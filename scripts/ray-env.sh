#!/usr/bin/env bash
# Sourced by scripts/test.sh (or run alone): the environment of the Ray Serve adapter's tests.
#
# A virtual environment with Ray Serve 2.60.0 (ray[serve], from PyPI) cached under ~/.cache,
# keyed by the hash of requirements/ray.txt: a fresh machine builds it (~80 packages, ~110 MB
# download, 533 MB on disk; measured 112 s, then 1-5 min to build ttlpolicy into it: 227 s on 2
# loaded cores), a rerun reuses it.  No torch and no engine: the
# tests' replicas are CPU stand-ins holding real ttlpolicy pins (adapters/ray/tests/standin.py;
# docs/ray.md says why and what that leaves untested).
# Then ttlpolicy (Rust core + Python package, from this checkout) and the adapter package
# (editable) are installed into it; the Rust build has its own folder, target/venvs/<venv name>.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
install_ray() {
  echo "==> installing the Ray Serve test environment, once: requirements/ray.txt (ray 2.60.0" \
    "with its serve extras, ~80 packages, ~110 MB download); about 1.5 min" >&2
  pip_install "$1/bin/python" -r "$ROOT/requirements/ray.txt"
}
engine_venv RAY_VENV ray "$ROOT/requirements/ray.txt" "" install_ray "$ROOT/adapters/ray"
