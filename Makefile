# Two commands for a fresh machine: `make bench` and `make test` (see README.md).
# PYTHON picks the interpreter (and so the torch build) to use: make bench PYTHON=/path/to/python.
# One without torch is never installed into: scripts/install_deps.sh makes this checkout's own
# virtualenv (.venv) with torch instead, and prints the interpreter to run, which is used here.
PYTHON ?= python3
ARGS ?=
# The Python versions make test-matrix runs the suite on; empty: every supported one but PYTHON's.
MATRIX ?=

.PHONY: bench test test-fast test-busy test-matrix deps test-deps

deps:
	@bash scripts/install_deps.sh $(PYTHON) >/dev/null

test-deps:
	@bash scripts/install_deps.sh --test $(PYTHON) >/dev/null

bench:
	@py=$$(bash scripts/install_deps.sh $(PYTHON)) && echo "$$py bench.py $(ARGS)" >&2 && \
	  "$$py" bench.py $(ARGS)

# Two workers (pytest-xdist): the valgrind counts keep both cores busy, most other tests one;
# tests that read one expensive fixture run in one worker (tests/conftest.py says which).
test:
	@py=$$(bash scripts/install_deps.sh --test $(PYTHON)) && \
	  echo "$$py -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder tests $(ARGS)" >&2 && \
	  "$$py" -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder tests $(ARGS)

# The edit-test loop: every test but those marked slow (valgrind, py-spy, comparisons, reports;
# tests/conftest.py marks the ones that read a shared expensive run), under a minute on two CPUs.
test-fast:
	@py=$$(bash scripts/install_deps.sh --test $(PYTHON)) && \
	  echo "$$py -m pytest -q -n 2 -m 'not slow' tests $(ARGS)" >&2 && \
	  "$$py" -m pytest -q -n 2 -m "not slow" tests $(ARGS)

# The suite beside one CPU-bound process per core: every test must hold on a busy machine.
test-busy:
	@bash scripts/busy.sh $(MAKE) --no-print-directory test PYTHON=$(PYTHON) ARGS="$(ARGS)"

# The fast tests and the matrix-marked slow ones on every other supported Python this machine has
# (docs/pythons.md).
test-matrix:
	@bash scripts/matrix.sh $(MATRIX)
