"""Pin glibc malloc's heap-top behaviour from process start, so two processes allocate alike.

Every torch call here allocates and frees a result tensor, and the heap's history decides how
objects are laid out and how often a free costs a trim. A virtualenv and its own base
interpreter, running the same binary, timed plain `torch.add` apart in every worker pair: a
fake regression in a case no change could touch. With `MALLOC_TOP_PAD_` set in the environment
(so in force from the first allocation of start-up) the same pair read next to nothing. Setting
the same value with `mallopt` after start-up was not enough: the base-vs-venv A/A still showed
SubTensor and WithTorchFunction apart, and far less with the variable, run back to back
(figures: benchmarks/history.md, 'Docstring figures'). So every process
that times is started with `MALLOC_ENV`: the A/B workers and the Callgrind worker by their
parent, `bench.py` by re-executing itself once before importing torch (`overrides/clock/layout.py`).
"""

from __future__ import annotations

MALLOC_ENV = {"MALLOC_TOP_PAD_": str(256 * 1024 * 1024)}  # large against any heap grown here
