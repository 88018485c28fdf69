# Sourced by env.sh and the engine scripts (vllm-env.sh, vllm033-env.sh, sglang-env.sh): the
# cached-virtual-environment rule, in one place.
# cached_venv DIR INSTALL: reuse DIR when a complete venv is there; otherwise build it afresh
# and run INSTALL (a command or function, given DIR), then mark it complete. A build that
# fails half-way leaves no marker, so the next run starts over.
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3

cached_venv() {
  local dir=$1 install=$2 t0=$SECONDS
  if [ -x "$dir/bin/python" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  echo "==> first run: creating the virtual environment $dir (venv and pip upgrade: ~10 s)" >&2
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  "$install" "$dir"
  touch "$dir/.complete"
  echo "==> $dir ready in $((SECONDS - t0)) s (reused from now on)" >&2
}

# pip_install PYTHON ARGS...: pip install with one line per package fetched, so that a long
# first install shows what it is doing (pip -q is silent for minutes; plain pip floods).
pip_install() {
  local py=$1
  shift
  "$py" -m pip install --progress-bar off "$@" 2>&1 |
    { grep --line-buffered -E '^ *(Collecting|Downloading|Installing collected|Successfully|ERROR)' |
      sed -u -e 's/^Installing collected packages:.*/  installing (unpacking the downloads).../' \
        -e 's/^Successfully installed.*/  done/' -e 's/^ *\(Collecting\|Downloading\)/  \1/' \
        >&2 || true; }
}

# build_native VENV: builds ttlpolicy (Rust core + Python package) from this checkout into
# VENV, in that venv's own Rust build folder (target/venvs/<venv name>). Says beforehand how
# long it should take (the first build of a folder compiles pyo3 and the core: 1-5 min; later
# ones only what changed) and afterwards how long it took. On a terminal cargo's own progress
# shows (a line per crate and a bar redrawn in place); elsewhere (CI logs) only those two lines
# and maturin's six.
build_native() {
  local venv=$1 target t0=$SECONDS verbosity=(--quiet)
  target="$ROOT/target/venvs/$(basename "$venv")"
  if compgen -G "$target/release/.fingerprint/pyo3-*" >/dev/null; then
    echo "==> building ttlpolicy into $venv (only what changed: seconds, ~1 min after" \
      "a change to the Rust code)" >&2
  else
    echo "==> building ttlpolicy into $venv: first build in $target, compiling pyo3 and the" \
      "Rust core, 1-5 min (measured: 72 s on 2 shared cores, 5 min from a fresh clone on a" \
      "loaded machine)" >&2
  fi
  if [ -t 2 ]; then
    verbosity=()
  fi
  (cd "$ROOT" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$target" \
    maturin develop --release "${verbosity[@]}" >/dev/null)
  echo "==> ttlpolicy built in $((SECONDS - t0)) s" >&2
}

# engine_venv VAR NAME LOCK PIN INSTALL ADAPTER: the cached venv of an engine adapter's tests,
# its path left in VAR — $TTLPOLICY_VAR where set, else ~/.cache/ttlpolicy/venv-NAME-<hash of
# LOCK and PIN> — built by INSTALL on a fresh machine, then ttlpolicy from this checkout
# (build_native) and the adapter package ADAPTER (editable). One recipe for the vLLM 0.32,
# vLLM 0.33 and SGLang venvs.
engine_venv() {
  local var=$1 name=$2 lock=$3 pin=$4 install=$5 adapter=$6 key dir override
  key=$( (cat "$lock"; echo "$pin") | sha256sum | cut -c1-16)
  override="TTLPOLICY_$var"
  dir="${!override:-$HOME/.cache/ttlpolicy/venv-$name-$key}"
  printf -v "$var" '%s' "$dir"
  cached_venv "$dir" "$install"
  build_native "$dir"
  echo "==> installing ${adapter#"$ROOT"/} into $dir" >&2
  "$dir/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$adapter"
}
