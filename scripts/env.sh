# Sourced by the other scripts: a virtual environment for ttlpolicy's tests, benchmarks and
# demo, cached under ~/.cache keyed by the hash of requirements/dev.txt (a fresh machine builds
# it, a rerun reuses it), and the package built into it from this checkout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
key=$(cat "$ROOT/requirements/dev.txt" | sha256sum | cut -c1-16)
VENV="${TTLPOLICY_VENV:-$HOME/.cache/ttlpolicy/venv-dev-$key}"
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  echo "==> creating $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements/dev.txt"
  touch "$VENV/.complete"
fi
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$PATH"
echo "==> building ttlpolicy (Rust core + Python package) into $VENV" >&2
(cd "$ROOT" && maturin develop --release --quiet >/dev/null)
