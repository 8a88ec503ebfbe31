# Two commands for a fresh machine: `make bench` and `make test` (see README.md).
# PYTHON picks the interpreter (and so the torch build) to use: make bench PYTHON=/path/to/python
PYTHON ?= python3
ARGS ?=

.PHONY: bench test deps test-deps

deps:
	bash scripts/install_deps.sh $(PYTHON)

test-deps: deps
	bash scripts/install_deps.sh --test $(PYTHON)

bench: deps
	$(PYTHON) bench.py $(ARGS)

# Two workers (pytest-xdist): the valgrind counts keep both cores busy, most other tests one;
# tests that read one expensive fixture run in one worker (tests/conftest.py says which).
test: test-deps
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder tests $(ARGS)
