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

test: test-deps
	$(PYTHON) -m pytest -q tests $(ARGS)
