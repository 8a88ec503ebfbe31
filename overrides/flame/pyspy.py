"""py-spy itself: which one to run, and how fast it samples.

Both the recordings (`flamegraph.py`) and `pyspybench.py --record` (`hotloop.py`, which becomes
py-spy after the imports) start py-spy; this is the one place that finds it and sets its rate.
"""

from __future__ import annotations

import os
import shutil
import sys

from overrides import ROOT
from overrides.errors import UsageError

# Samples a second: py-spy --native keeps up at this rate here, and hotloop.DEFAULT_SECONDS of
# hot loop give 1000+ samples (the default 100/s would need twice as long per case).
PYSPY_RATE_HZ = 200
PYSPY_VARIABLE = "PYSPY"  # which py-spy to use, when not the one on PATH
INSTALL_HINT = "install it with `python3 -m pip install py-spy` (no root needed to record a process it starts)"


def find_pyspy(python: str | None = None) -> str:
    """$PYSPY, or py-spy beside the interpreter (a virtualenv's bin/), on PATH, or in this
    checkout's own `.venv` (where `make test` installs it: a report on two other environments
    found none before); else a UsageError saying how to install it."""
    given = os.environ.get(PYSPY_VARIABLE)
    if given:
        if os.access(given, os.X_OK) and not os.path.isdir(given):
            return given
        raise UsageError(f"{PYSPY_VARIABLE}={given} is not an executable py-spy; {INSTALL_HINT}, "
                         f"or unset {PYSPY_VARIABLE}")
    for folder in filter(None, (os.path.dirname(python or ""), os.path.dirname(sys.executable))):
        candidate = os.path.join(folder, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("py-spy")
    if found:
        return found
    own = os.path.join(ROOT, ".venv", "bin", "py-spy")
    if os.access(own, os.X_OK) and not os.path.isdir(own):
        return own
    raise UsageError(f"py-spy not found; {INSTALL_HINT}")
