# Sourced by the other scripts: a virtual environment for ttlpolicy's tests, benchmarks and
# demo, cached under ~/.cache keyed by the hash of requirements/dev.txt (a fresh machine builds
# it, a rerun reuses it), and the package built into it from this checkout.  Each venv has its
# own Rust build folder (target/venvs/<venv name>): the build depends on the interpreter, so a
# shared one would be rebuilt at every switch between the dev and the vLLM venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
key=$(sha256sum <"$ROOT/requirements/dev.txt" | cut -c1-16)
VENV="${TTLPOLICY_VENV:-$HOME/.cache/ttlpolicy/venv-dev-$key}"
install_dev() {
  echo "==> installing requirements/dev.txt (numpy, pydantic, matplotlib, pytest, hypothesis," \
    "maturin, ruff, mypy): ~170 MB download, about a minute" >&2
  pip_install "$1/bin/python" -r "$ROOT/requirements/dev.txt"
}
cached_venv "$VENV" install_dev
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$PATH"
build_native "$VENV"
