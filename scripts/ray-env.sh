#!/usr/bin/env bash
# Sourced by scripts/test.sh (or run alone): the environment of the routing adapters' tests
# (adapters/ray/tests: the Ray Serve adapter's, and SGLang's gateway in front of fake workers).
#
# A virtual environment with Ray Serve 2.60.0 (ray[serve], from PyPI) and sglang-router 0.3.2
# (SGLang's Model Gateway, a Rust binary in its wheel) cached under ~/.cache, keyed by the hash
# of requirements/ray.txt: a fresh machine builds it (~85 packages, ~140 MB download, 622 MB on
# disk; measured 125 s, then 1-5 min to build ttlpolicy into it: 144 s on 2 loaded cores), a
# rerun reuses it.  No torch and no engine: the Ray tests' replicas are CPU stand-ins holding
# real ttlpolicy pins (adapters/ray/tests/standin.py; docs/ray.md says why and what that leaves
# untested), the gateway's workers are fake SGLang HTTP servers (docs/routers.md).
# Then ttlpolicy (Rust core + Python package, from this checkout) and the adapter package
# (editable) are installed into it; the Rust build has its own folder, target/venvs/<venv name>.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
install_ray() {
  echo "==> installing the routing adapters' test environment, once: requirements/ray.txt (ray" \
    "2.60.0 with its serve extras, sglang-router 0.3.2; ~85 packages, ~140 MB download); about 2 min" >&2
  pip_install "$1/bin/python" -r "$ROOT/requirements/ray.txt"
}
engine_venv RAY_VENV ray "$ROOT/requirements/ray.txt" "" install_ray "$ROOT/adapters/ray"
