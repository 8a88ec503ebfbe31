#!/usr/bin/env bash
# scripts/matrix.sh [VERSION ...]: the test suite on every other supported Python this machine has
# (`make test-matrix`; `make test` runs the whole suite on one): one slow run of each part that
# meets the interpreter, and the fast tests on the newest (MATRIX_MARKS below).
#
# Each version gets a virtualenv of its own in the user's cache (OVERRIDES_MATRIX_DIR), made by
# install_deps.sh with MATRIX_TORCH (the registry's wheel for that Python: a CUDA build, ~5 GB,
# runs on the CPU), never touching the interpreter itself. A version this machine lacks is skipped
# with a line saying how to get it; with MATRIX_REQUIRED=1 (CI) that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# The supported range (docs/pythons.md; pyproject.toml's requires-python)
SUPPORTED=(3.11 3.12 3.13)  # 3.10: docs/pythons.md says why not
VERSIONS=("$@")
if [ ${#VERSIONS[@]} -eq 0 ]; then  # every supported version but the one make test runs on
  own=$("${PYTHON:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
  for version in "${SUPPORTED[@]}"; do [ "$version" = "$own" ] || VERSIONS+=("$version"); done
fi
# 2.14.1: the newest torch this kind of machine's package index serves for 3.11-3.13
MATRIX_TORCH="${MATRIX_TORCH:-torch==2.14.1}"
MATRIX_DIR="${OVERRIDES_MATRIX_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torch-function-overhead/matrix}"
MATRIX_TESTS="${MATRIX_TESTS:-tests}"
# Which tests: one slow run of each part that meets the interpreter (counts, start-up paths,
# Python-call counts, py-spy's frames, Dynamo: tests/conftest.py, MATRIX_RUNS) on every version;
# the fast tests too on the newest (NEWEST), which with the one `make test` runs brackets the
# versions between (3.11's sys.settrace, 3.12 and 3.13's sys.monitoring). The whole suite on three
# Pythons took 72 min in CI; these on both others 11-12 of CI's 55 min (a version's shared runs
# ~6 of its 11), past its 45. A version between the range's ends leaves out the runs marked `ends`
# (valgrind's side of a count, which reads nothing of the interpreter's version: conftest.py's
# ENDS_ONLY), bracketed by the ends. MATRIX_MARKS set (empty: the whole suite) chooses for every version.
OLDEST="${SUPPORTED[0]}"
NEWEST="${SUPPORTED[${#SUPPORTED[@]}-1]}"
marks_for() {  # the -m expression for version $1
  if [ -n "${MATRIX_MARKS+set}" ]; then echo "$MATRIX_MARKS"
  elif [ "$1" = "$NEWEST" ]; then echo "not slow or matrix"
  elif [ "$1" = "$OLDEST" ]; then echo "matrix"
  else echo "matrix and not ends"
  fi
}

find_python() {  # the first interpreter of minor version $1 that runs: on PATH, then pyenv's
  local candidate root
  for candidate in "python$1" "/usr/bin/python$1" "/usr/local/bin/python$1"; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$1'.split('.'))))" >/dev/null 2>&1; then
      command -v "$candidate"; return 0
    fi
  done
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for candidate in "$root"/versions/"$1".*/bin/python"$1"; do
    if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
  done
  return 1
}

for version in "${VERSIONS[@]}"; do
  if ! [[ "$version" =~ ^3\.[0-9]+$ ]]; then
    echo "matrix: error: '$version' is not a Python version like 3.12; name minor versions (MATRIX=\"3.12 3.13\")" >&2
    exit 2
  fi
done
failed=()
skipped=()
ran=()
for version in "${VERSIONS[@]}"; do
  if ! python=$(find_python "$version"); then
    echo "matrix: no Python $version here (pyenv install $version, or apt-get install python$version-venv); skipped" >&2
    skipped+=("$version")
    continue
  fi
  echo "matrix: Python $version ($python), $MATRIX_TORCH in $MATRIX_DIR/py$version" >&2
  if ! py=$(OVERRIDES_VENV="$MATRIX_DIR/py$version" OVERRIDES_TORCH_PIN="$MATRIX_TORCH" \
            bash scripts/install_deps.sh --test "$python"); then
    failed+=("$version (install)")
    continue
  fi
  ran+=("$version")
  marks=$(marks_for "$version")
  echo "matrix: Python $version runs ${marks:-every test} (-m \"$marks\")" >&2
  status=0
  # shellcheck disable=SC2086
  "$py" -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider \
       ${marks:+-m "$marks"} $MATRIX_TESTS || status=$?
  if [ "$status" = 5 ]; then  # pytest's "no tests collected": MATRIX_TESTS holds none of these
    echo "matrix: Python $version: none of $MATRIX_TESTS is selected by -m \"$marks\"" >&2
  elif [ "$status" != 0 ]; then
    failed+=("$version")
  fi
done
if [ ${#skipped[@]} -gt 0 ] && [ "${MATRIX_REQUIRED:-0}" = 1 ]; then
  failed+=("${skipped[@]/%/ (missing)}")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "matrix: failed on Python ${failed[*]}" >&2
  exit 1
fi
if [ ${#ran[@]} -eq 0 ]; then
  echo "matrix: error: none of Python ${VERSIONS[*]} is here, so nothing was tested; install one (pyenv install 3.12)" >&2
  exit 2
fi
echo "matrix: passed on Python ${ran[*]}${skipped:+ (skipped: ${skipped[*]})}" >&2
