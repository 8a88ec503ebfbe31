"""Every environment variable of this tool's own, declared once: what each one carries, and
between whom. The parent and its worker processes (timing, counting, the Python-call probe)
agree through these names; a name typed twice was once two names.

`counts/statfinder.py` declares its four itself (LAYOUT_VARIANT, COUNT_TOOL, COUNT_VIEW,
COUNT_OWN_PATH): it runs in the counting process before this package can be imported, which is
its purpose. `scripts/*.sh` read OVERRIDES_VENV, OVERRIDES_TORCH_PIN and OVERRIDES_MATRIX_DIR,
which no Python here reads.
"""

# Set by the user
SAME_PATH = "OVERRIDES_SAME_PATH"  # "off": start every side from its own paths (builds/samepath.py)
RUNS_DIR = "OVERRIDES_RUNS_DIR"  # where runs/ lives, when not in this checkout (review/runs.py)
BUILD_CACHE = "OVERRIDES_BUILD_CACHE"  # where --history installs requirements (history/lineup.py)
COUNTS_CACHE = "OVERRIDES_COUNTS_CACHE"  # where counts are kept for reuse, or "off" (counts/kept.py)

# Set by the parent for a worker process
USER_DIR = "OVERRIDES_USER_DIR"  # the user's folder, for workers run elsewhere (cases/casenames.py)
YOUR_CODE = "OVERRIDES_YOUR_CODE"  # which of your code a side builds, SHOWN=BUILT (cases/casenames.py)
WORKER_THREADS = "OVERRIDES_WORKER_THREADS"  # torch threads in a timing worker (ab/pairs.py -> ab/worker.py)
LAYOUT_PAD = "OVERRIDES_LAYOUT_PAD"  # padding that moves the initial stack (ab/pairs.py, counts/valgrind.py)
LAYOUT_PINNED = "OVERRIDES_LAYOUT_PINNED"  # set on bench.py's re-executed process: never loop (clock/layout.py)
