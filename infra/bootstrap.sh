# Sourced by ./kswarm and ./run-tests: make .venv (Python >= 3.11) and install kswarm into it.
# Idempotent: a stamp of pyproject.toml's hash skips the install when nothing changed.
set -euo pipefail

KSWARM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$KSWARM_ROOT/.venv"

find_python() {
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        command -v "$candidate"; return 0
    fi
  done
  echo "kswarm needs Python >= 3.11 (apt-get install python3 python3-venv)" >&2
  return 1
}

# pip, keeping only what matters: its warnings about this machine's index settings are noise.
pip_quiet() {
  local log
  log="$(mktemp)"
  if ! "$VENV/bin/python" -m pip -q "$@" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}

# bootstrap_venv EXTRAS: e.g. "server,verify" for the main job, "server,dev,verify,claude" for the tests.
bootstrap_venv() {
  local extras="${1:-}"
  if [ ! -x "$VENV/bin/python" ]; then
    "$(find_python)" -m venv "$VENV"
  fi
  local stamp="$VENV/.kswarm-installed"
  local want
  want="$(cat "$KSWARM_ROOT/pyproject.toml" | sha256sum | cut -c1-16):${extras}"
  if [ -f "$stamp" ] && grep -qxF "$want" "$stamp"; then
    return 0
  fi
  echo "kswarm: installing into $VENV (first run, or pyproject.toml changed)..." >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  if [[ ",$extras," == *",verify,"* ]]; then
    # The CPU build that lies on this disk; a bare "torch" would pull a multi-GB CUDA build.
    pip_quiet install "torch==2.13.0"
  fi
  local target="$KSWARM_ROOT"
  [ -n "$extras" ] && target="$KSWARM_ROOT[$extras]"
  pip_quiet install -e "$target"
  # Every accepted extras set is recorded, so switching between the two commands stays cheap.
  echo "$want" >>"$stamp"
}
