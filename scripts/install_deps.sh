#!/usr/bin/env bash
# Install what the benchmark (or, with --test, the test suite) needs into the given Python.
# A torch that is already importable is never replaced: people benchmark their own builds.
# --test also installs the system tools the tests drive for real: valgrind and Chromium
# (apt-get, when they are missing and this user may install packages).
set -euo pipefail
cd "$(dirname "$0")/.."
test_deps=0
if [ "${1:-}" = "--test" ]; then test_deps=1; shift; fi
PY=${1:-python3}
TORCH_PIN="torch==2.13.0"  # the CPU wheel this kind of machine has on disk; unpinned pulls GBs of CUDA

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_deps: no interpreter '$PY'; pass PYTHON=/path/to/python" >&2
  exit 2
fi
if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "install_deps: using the torch already in $PY: $("$PY" -c 'import torch; print(torch.__version__)')" >&2
else
  # A system interpreter (PEP 668: Debian's /usr/bin/python3) refuses pip installs, and nothing
  # should be installed into it anyway: say what to do instead of letting pip fail.
  if "$PY" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))" 2>/dev/null; then
    echo "install_deps: $PY has no torch and is managed by the system (PEP 668), so nothing is installed into it; make a virtualenv and use it: python3 -m venv .venv && make bench PYTHON=.venv/bin/python" >&2
    exit 2
  fi
  echo "install_deps: no torch in $PY; installing $TORCH_PIN into it ($("$PY" -c 'import sys; print(sys.prefix)'))" >&2
  "$PY" -m pip install -q "$TORCH_PIN"
fi
[ "$test_deps" = 1 ] || exit 0

"$PY" -m pip install -q -r requirements-test.txt

# System packages: valgrind (instruction counts) and Chromium (flamegraph screenshots).
missing=()
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/lib/chromium/chromium ] && \
   ! command -v google-chrome >/dev/null 2>&1 && [ -z "${CHROMIUM:-}" ]; then
  missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else sudo=(none); fi
if [ "${sudo[0]:-}" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps: the tests need ${missing[*]}; install them (Debian/Ubuntu: apt-get install -y --no-install-recommends ${missing[*]})" >&2
  exit 2
fi
echo "install_deps: installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# --no-install-recommends: Chromium alone, without ~115 packages (systemd, printer tools) it suggests
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
