#!/usr/bin/env bash
# Install what the benchmark (or, with --test, the test suite) needs, and print on stdout the
# interpreter to run it with (the Makefile runs that one).
# A torch that is already importable is never replaced: people benchmark their own builds. An
# interpreter without torch is never installed into either: torch goes into this checkout's own
# virtualenv (.venv, or $OVERRIDES_VENV), made from that interpreter, and that one is printed.
# --test also installs what the tests drive for real: pytest, py-spy and matplotlib (which draws
# the flamegraphs' PNGs) from pip, and valgrind, the one system package (apt-get, when it is
# missing and this user may install packages).
set -euo pipefail
cd "$(dirname "$0")/.."
test_deps=0
if [ "${1:-}" = "--test" ]; then test_deps=1; shift; fi
PY=${1:-python3}
# The CPU wheel this kind of machine has on disk; unpinned pulls GBs of CUDA.
# OVERRIDES_TORCH_PIN replaces it (the tests install a hand-made wheel this way).
TORCH_PIN="${OVERRIDES_TORCH_PIN:-torch==2.13.0}"
VENV="${OVERRIDES_VENV:-$PWD/.venv}"

has_torch() { "$1" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" >/dev/null 2>&1; }

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_deps: no interpreter '$PY'; pass PYTHON=/path/to/python" >&2
  exit 2
fi
if has_torch "$PY"; then
  echo "install_deps: using the torch already in $PY: $("$PY" -c 'import torch; print(torch.__version__)')" >&2
elif [ -x "$VENV/bin/python" ] && has_torch "$VENV/bin/python"; then
  echo "install_deps: $PY has no torch; using this checkout's virtualenv $VENV ($("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))" >&2
  PY="$VENV/bin/python"
else
  echo "install_deps: $PY has no torch; making a virtualenv, $VENV, with $TORCH_PIN (nothing is installed into $PY; PYTHON=/path/to/python runs another torch)" >&2
  existed=0; [ -e "$VENV" ] && existed=1
  if ! err=$("$PY" -m venv "$VENV" 2>&1); then
    case "$err" in
      *ensurepip*|*"No module named venv"*) fix="install its venv module (Debian/Ubuntu: apt-get install python3-venv)" ;;
      *) fix="make it elsewhere with OVERRIDES_VENV=/a/writable/folder" ;;
    esac
    echo "install_deps: $PY could not make a virtualenv at $VENV ($(printf '%s' "$err" | tail -n 1)); $fix, or pass PYTHON=/path/to/python that has torch" >&2
    exit 2
  fi
  # numpy beside it: torch warns at every import without it ("Failed to initialize NumPy")
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$TORCH_PIN" numpy >&2; then
    # half made by this run: nothing left that a later run would take for a working one
    [ "$existed" = 1 ] || rm -rf "$VENV"
    echo "install_deps: pip could not install $TORCH_PIN into $VENV (its message is above); check the pin (OVERRIDES_TORCH_PIN) and the package index, or pass PYTHON=/path/to/python that has torch" >&2
    exit 2
  fi
  PY="$VENV/bin/python"
fi
if [ "$test_deps" = 0 ]; then echo "$PY"; exit 0; fi

"$PY" -m pip install -q --disable-pip-version-check -r requirements-test.txt >&2

# The one system package: valgrind (instruction counts). No browser: matplotlib draws the PNGs.
missing=()
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
if [ ${#missing[@]} -eq 0 ]; then echo "$PY"; exit 0; fi
if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else sudo=(none); fi
if [ "${sudo[0]:-}" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps: the tests need ${missing[*]}; install them (Debian/Ubuntu: apt-get install -y --no-install-recommends ${missing[*]})" >&2
  exit 2
fi
echo "install_deps: installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
# --no-install-recommends: valgrind alone, without gdb and valgrind-dbg, which it recommends
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "$PY"
