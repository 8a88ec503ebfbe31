"""Start `bench.py` with its memory layout pinned, so two runs of one build lay out alike.

Where objects and code land decides how caches and branch predictors treat the hot path, and
that moves a torch call by a few percent from process to process. `bench.py` re-executes itself
once, before torch is imported, with:

- glibc's heap-top behaviour pinned (`MALLOC_ENV`, see `overrides/clock/allocator.py`);
- address-space randomisation off (`personality(ADDR_NO_RANDOMIZE)`, what `setarch -R` does);
- the string hash seed fixed (`PYTHONHASHSEED=0`, unless the user set one).

Why: with randomisation and a random hash seed, the 2nd percentile of one build spread across
invocations by more than the seed method's minimum did; pinned, it spread far less, in the same
run, the two interleaved (`benchmarks/seed_vs_bench.py`; figures: benchmarks/history.md,
'Docstring figures'). The figure then belongs to one layout: another build, interpreter path or
environment is another layout, some way away by luck alone, so builds are compared with
`--compare` (layouts varied between pairs and matched within each), never across two runs.
`bench.py --random-layout` keeps randomisation on.
"""

from __future__ import annotations

import os
import sys

from overrides.clock.allocator import MALLOC_ENV
from overrides import variables

HASH_SEED = "0"  # any fixed value would do; 0 also switches string-hash randomisation off
ADDR_NO_RANDOMIZE = 0x0040000  # from <sys/personality.h>
_QUERY = 0xFFFFFFFF  # personality(0xffffffff) reads the persona without changing it
RANDOM_LAYOUT_FLAG = "--random-layout"
_REEXEC_MARK = variables.LAYOUT_PINNED  # set on the re-executed process: never loop


def _personality(value: int) -> int:
    """The personality syscall through libc; -1 where it cannot be called."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).personality(value)
    except (OSError, AttributeError):
        return -1


def randomisation_off() -> bool | None:
    """Whether this process runs without address-space randomisation (None: cannot tell)."""
    if not sys.platform.startswith("linux"):
        return None
    current = _personality(_QUERY)
    return None if current == -1 else bool(current & ADDR_NO_RANDOMIZE)


def reexec_pinned(argv: list[str] | None = None) -> None:
    """Re-run this script with the heap pinned and, unless `--random-layout` is in `argv`, the
    address space and hash seed too (Linux only; at most once). Call it first thing in an
    entry point, before torch is imported."""
    argv = sys.argv if argv is None else argv
    if os.environ.get(_REEXEC_MARK) or not sys.platform.startswith("linux"):
        return
    env = dict(os.environ, **MALLOC_ENV, **{_REEXEC_MARK: "1"})
    if RANDOM_LAYOUT_FLAG not in argv:
        current = _personality(_QUERY)
        if current != -1:
            _personality(current | ADDR_NO_RANDOMIZE)  # inherited across the exec below
        env.setdefault("PYTHONHASHSEED", HASH_SEED)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + argv, env)
